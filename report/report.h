// Campaign reports: what the store knows about one campaign, gathered once (CampaignReport) and
// rendered as terminal text, Markdown or JSON. Every renderer shows the same data: per
// configuration the boundary in plain words, the length x position heatmap of passes/answers,
// the outcome breakdown and, where probes exist, per indexer layer how often the needle was in
// the top-k at the last prompt position and its median rank. The self-contained HTML page is
// report/html.h.
// Thread-safety: LoadCampaignReport uses the caller's Store; the rest are pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "db/store.h"
#include "report/boundary.h"

namespace nw::report {

/// The six outcomes in report order: pass, miss, truncated, empty, engine_error, timeout.
inline constexpr std::array<Outcome, 6> kOutcomeOrder = {Outcome::kPass,        Outcome::kMiss,
                                                         Outcome::kTruncated,   Outcome::kEmpty,
                                                         Outcome::kEngineError, Outcome::kTimeout};

struct ConfigReport {
  ConfigBoundary boundary;              // boundary.config is the configuration label
  std::vector<HeatmapCell> cells;       // by length, then position
  std::array<int64_t, 6> outcomes{};    // counts in kOutcomeOrder
  std::vector<LayerProbeStats> probes;  // by layer; empty when no job carried probes
};

struct CampaignReport {
  CampaignRecord campaign;
  Criterion criterion;  // what the verdicts are judged against (the campaign's, or defaults)
  CampaignProgress progress;
  std::vector<ConfigReport> configs;  // natural order of the label
  std::array<int64_t, 6> outcomes{};  // whole campaign, kOutcomeOrder
};

/// Assembles a report from what the Store returns (pure: tests build inputs by hand).
CampaignReport BuildCampaignReport(const CampaignRecord& campaign, const CampaignProgress& progress,
                                   const std::vector<HeatmapCell>& cells,
                                   const std::vector<OutcomeCount>& outcomes,
                                   const std::vector<LayerProbeStats>& probes,
                                   const Criterion& criterion = {});

/// Reads everything for the named campaign (a read-only Store is enough) and judges it against
/// `criterion` (callers pass the campaign's own: ParseCampaignCriterion on its source_text).
/// NotFound names the campaign and the database file.
Result<CampaignReport> LoadCampaignReport(Store& store, const std::string& campaign_name,
                                          const Criterion& criterion = {});

struct TextOptions {
  bool color = false;  // ANSI colours in the heatmap (the CLI sets this when stdout is a TTY)
};

/// The terminal report.
std::string RenderText(const CampaignReport& r, const TextOptions& options = {});
/// The same as GitHub-flavoured Markdown.
std::string RenderMarkdown(const CampaignReport& r);
/// The same as JSON (numbers as numbers; absent boundaries as null).
nlohmann::json RenderJson(const CampaignReport& r);

}  // namespace nw::report
