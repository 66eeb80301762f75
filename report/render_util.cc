#include "report/render_util.h"

#include <algorithm>

#include "report/report.h"
#include "report/stats.h"

namespace nw::report::render_internal {

bool PositionLess(double a, double b) {
  const bool ea = a < 0, eb = b < 0;
  if (ea != eb) return !ea;
  return a < b;
}

Grid MakeGrid(const std::vector<HeatmapCell>& cells) {
  Grid g;
  for (const HeatmapCell& c : cells) {
    g.lengths.push_back(c.context_length);
    g.positions.push_back(c.needle_position);
    g.at[{c.context_length, c.needle_position}] = &c;
  }
  std::sort(g.lengths.begin(), g.lengths.end());
  g.lengths.erase(std::unique(g.lengths.begin(), g.lengths.end()), g.lengths.end());
  std::sort(g.positions.begin(), g.positions.end(), PositionLess);
  g.positions.erase(std::unique(g.positions.begin(), g.positions.end()), g.positions.end());
  return g;
}

const HeatmapCell* CellAt(const Grid& g, int64_t length, double position) {
  auto it = g.at.find({length, position});
  return it == g.at.end() ? nullptr : it->second;
}

std::string CellText(const HeatmapCell* c) {
  if (c == nullptr) return "";
  std::string s = c->trials > 0 ? std::to_string(c->passes) + "/" + std::to_string(c->trials)
                                : std::string("-");
  if (c->errors > 0) s += " e" + std::to_string(c->errors);
  if (c->failed > 0) s += " f" + std::to_string(c->failed);
  if (c->pending > 0) s += " p" + std::to_string(c->pending);
  return s;
}

std::string OutcomeList(const std::array<int64_t, 6>& counts) {
  std::string s;
  for (size_t i = 0; i < kOutcomeOrder.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::string(OutcomeName(kOutcomeOrder[i])) + " " + FormatThousands(counts[i]);
  }
  return s;
}

std::string ProgressLine(const CampaignProgress& p) {
  return FormatThousands(p.total) + " total, " + FormatThousands(p.done) + " done, " +
         FormatThousands(p.failed) + " failed, " + FormatThousands(p.leased) + " leased, " +
         FormatThousands(p.queued) + " queued";
}

}  // namespace nw::report::render_internal
