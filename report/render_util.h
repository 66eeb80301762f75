// Pieces shared by the report renderers (text, Markdown, JSON, HTML; internal to nw_report): the
// heatmap of one configuration as a length x position grid, the compact cell text, and the
// one-line progress and outcome summaries. Thread-safety: pure functions over values; a Grid
// points into the cells it was made from.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "db/store.h"

namespace nw::report::render_internal {

/// Needle positions in display order: fractions first (0% .. 100%), then offsets from the end,
/// farthest from the end first.
bool PositionLess(double a, double b);

/// The heatmap of one configuration as a grid (distinct lengths ascending, positions in
/// PositionLess order); `at` points into the cells MakeGrid was given.
struct Grid {
  std::vector<int64_t> lengths;
  std::vector<double> positions;
  std::map<std::pair<int64_t, double>, const HeatmapCell*> at;
};

Grid MakeGrid(const std::vector<HeatmapCell>& cells);
/// The cell at (length, position), or nullptr when that combination was not tested.
const HeatmapCell* CellAt(const Grid& g, int64_t length, double position);
/// "3/4", "- e2", "1/2 e1 f1 p1": passes/answers, then runs without an answer, failed jobs
/// (retries used up) and pending jobs.
std::string CellText(const HeatmapCell* c);

/// "pass 26, miss 5, truncated 1, empty 0, engine_error 1, timeout 0" (kOutcomeOrder counts).
std::string OutcomeList(const std::array<int64_t, 6>& counts);
/// "34 total, 33 done, 0 failed, 0 leased, 1 queued".
std::string ProgressLine(const CampaignProgress& p);

}  // namespace nw::report::render_internal
