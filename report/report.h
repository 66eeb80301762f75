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
#include <nlohmann/json_fwd.hpp>
#include <optional>
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
  std::vector<FailureReason> failures;  // why jobs ended without an answer, most jobs first
};

struct CampaignReport {
  CampaignRecord campaign;
  Criterion criterion;  // what the verdicts are judged against (the campaign's, or defaults)
  CampaignProgress progress;
  std::vector<ConfigReport> configs;  // natural order of the label
  std::array<int64_t, 6> outcomes{};  // whole campaign, kOutcomeOrder
  /// Why jobs ended without an answer, over every configuration, by (kind, reason), most jobs
  /// first (config left empty): failed jobs (retries used up), engine errors and timeouts.
  std::vector<FailureReason> failures;
  /// The GPU's busy fraction over the jobs whose GPU worker measured it (NVML; v_gpu_busy);
  /// nullopt when none did (CPU campaigns, no NVML): then the renderers leave it out.
  std::optional<GpuBusySummary> gpu_busy;
};

/// "GPU busy: 91.3% while the 236 jobs measured on a GPU ran (NVML, weighted by run time)".
std::string GpuBusyLine(const GpuBusySummary& g);

/// Assembles a report from what the Store returns (pure: tests build inputs by hand).
CampaignReport BuildCampaignReport(const CampaignRecord& campaign, const CampaignProgress& progress,
                                   const std::vector<HeatmapCell>& cells,
                                   const std::vector<OutcomeCount>& outcomes,
                                   const std::vector<LayerProbeStats>& probes,
                                   const Criterion& criterion = {},
                                   const std::vector<FailureReason>& failures = {});

/// The same failures summed over configurations by (kind, reason), most jobs first (config
/// left empty). Reasons that differ only in the worker the coordinator names ("engine error on
/// worker embedded-0: ...") are one reason naming the workers ("on workers embedded-0,
/// embedded-1: ...").
std::vector<FailureReason> FailuresByReason(const std::vector<FailureReason>& failures);

/// One line per reason, in the order given, e.g. "3 failed (retries used up): unavailable: POST
/// http://127.0.0.1:9/v1/completions: connection refused" (reasons longer than 300 characters
/// are cut with "..."). Empty when nothing failed.
std::vector<std::string> DescribeFailures(const std::vector<FailureReason>& failures);

/// Reads everything for the named campaign (a read-only Store is enough) and judges it against
/// `criterion` (callers pass the campaign's own: ParseCampaignCriterion on its source_text).
/// NotFound names the campaign and the database file.
Result<CampaignReport> LoadCampaignReport(Store& store, const std::string& campaign_name,
                                          const Criterion& criterion = {});

struct TextOptions {
  bool color = false;  // ANSI colours in the heatmap (the CLI sets this with ColorAllowed)
};

/// Whether output to a stream may use ANSI colours: only on a terminal, never when the
/// environment's NO_COLOR is set to anything but "" (https://no-color.org) or TERM is "dumb".
/// `no_color` and `term` are the variables' values (nullptr: unset).
bool ColorAllowed(bool is_terminal, const char* no_color, const char* term);
/// Whether a terminal may be redrawn in place (carriage return and erase-line): a terminal
/// whose TERM is not "dumb".
bool RedrawAllowed(bool is_terminal, const char* term);
/// The same for a file descriptor, reading NO_COLOR and TERM from the environment.
bool ColorAllowedOn(int fd);
bool RedrawAllowedOn(int fd);

/// The terminal report.
std::string RenderText(const CampaignReport& r, const TextOptions& options = {});
/// The same as GitHub-flavoured Markdown.
std::string RenderMarkdown(const CampaignReport& r);
/// The same as JSON (numbers as numbers; absent boundaries as null).
nlohmann::json RenderJson(const CampaignReport& r);

}  // namespace nw::report
