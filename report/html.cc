#include "report/html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/clopper_pearson.h"
#include "report/escape.h"
#include "report/render_util.h"
#include "report/stats.h"

namespace nw::report {
namespace {

Verdict CellVerdictOf(const ConfigBoundary& b, int64_t length, double position) {
  for (const CellDecision& d : b.cell_verdicts) {
    if (d.length == length && d.position == position) return d.verdict;
  }
  return Verdict::kNoAnswers;
}

std::string VerdictMark(const ConfigBoundary& b, int64_t length, double position) {
  switch (CellVerdictOf(b, length, position)) {
    case Verdict::kFound:
      return "+";
    case Verdict::kLost:
      return "x";
    case Verdict::kUndecided:
      return "?";
    case Verdict::kNoAnswers:
      return "";
  }
  return "";
}

using render_internal::CellAt;
using render_internal::CellText;
using render_internal::Grid;
using render_internal::MakeGrid;
using render_internal::OutcomeList;
using render_internal::ProgressLine;

// Heatmap geometry (pixels).
constexpr int kLabelWidth = 92;    // the length column on the left
constexpr int kHeaderHeight = 44;  // axis caption and position labels above the cells
constexpr int kCellWidth = 76;
constexpr int kCellHeight = 32;
constexpr int kMarkerWidth = 260;  // boundary markers to the right of the rows

// One colour per outcome, in kOutcomeOrder.
constexpr std::array<const char*, 6> kOutcomeColors = {"#1a9850", "#d73027", "#f46d43",
                                                       "#fdae61", "#7b3294", "#636363"};

constexpr const char* kStyle = R"css(
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
       sans-serif; color: #1f1f1f; background: #fff; max-width: 1180px; margin: 1.5em auto;
       padding: 0 1.2em; line-height: 1.45; }
h1 { font-size: 1.6em; margin: 0.2em 0 0.4em; }
h2 { font-size: 1.2em; margin: 0 0 0.5em; }
h3 { font-size: 1em; margin: 1.2em 0 0.4em; color: #444; }
code { background: #f2f2f2; padding: 1px 5px; border-radius: 3px; font-size: 0.92em; }
table { border-collapse: collapse; margin: 0.4em 0 0.8em; }
th, td { border: 1px solid #d0d0d0; padding: 4px 9px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.meta { color: #555; margin: 0 0 1em; }
.boundary { font-size: 1.08em; border-left: 5px solid #888; padding: 0.3em 0 0.3em 0.7em;
            margin: 0.4em 0 0.9em; background: #fafafa; }
.boundary.lost { border-left-color: #d73027; }
.boundary.found { border-left-color: #1a9850; }
section.config { border-top: 1px solid #ddd; padding-top: 1.1em; margin-top: 1.6em; }
svg { display: block; max-width: 100%; height: auto; }
svg text { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; }
.heatmap .cell text { pointer-events: none; }
.heatmap .cell:hover rect { stroke: #000; stroke-width: 2; }
.legend { color: #555; font-size: 0.9em; margin-top: 2em; border-top: 1px solid #ddd;
          padding-top: 0.8em; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; vertical-align: -0.1em;
          border-radius: 2px; margin: 0 0.25em 0 0.9em; }
)css";

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  std::string s = buf;
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s;
}

// The tooltip of one heatmap cell (its verdict and interval are added by the caller).
std::string CellTooltip(const HeatmapCell& c) {
  std::string t = FormatThousands(c.context_length) + " tokens, needle at " +
                  FormatPosition(c.needle_position) + ": ";
  if (c.trials > 0) {
    t += FormatThousands(c.passes) + "/" + FormatThousands(c.trials) + " passed (" +
         FormatPercent(c.passes, c.trials) + ")";
  } else {
    t += "no answers";
  }
  if (c.errors > 0) {
    t += "; " + FormatThousands(c.errors) +
         " without an answer (engine_error, timeout, truncated or empty; not misses)";
  }
  if (c.failed > 0) {
    t += "; " + FormatThousands(c.failed) + " failed (retries used up, no result)";
  }
  if (c.pending > 0) t += "; " + FormatThousands(c.pending) + " pending";
  return t;
}

std::string TextColorOn(double rate) { return rate < 0.25 || rate > 0.8 ? "#ffffff" : "#1f1f1f"; }

std::string Heatmap(const ConfigReport& c) {
  const Grid g = MakeGrid(c.cells);
  const ConfigBoundary& b = c.boundary;
  const int cols = static_cast<int>(g.positions.size());
  const int rows = static_cast<int>(g.lengths.size());
  const int width = kLabelWidth + cols * kCellWidth + kMarkerWidth;
  const int height = kHeaderHeight + rows * kCellHeight + 8;
  std::string s;
  s += "<svg class=\"heatmap\" role=\"img\" width=\"" + std::to_string(width) + "\" height=\"" +
       std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) + " " +
       std::to_string(height) + "\">\n";
  s += "<title>" +
       HtmlEscape("Heatmap of " + b.config +
                  ": rows are context lengths, columns needle positions, colour the pass rate") +
       "</title>\n";
  s += "<text x=\"" + std::to_string(kLabelWidth + cols * kCellWidth / 2) +
       "\" y=\"14\" text-anchor=\"middle\" font-size=\"12\" fill=\"#555\">needle position</text>\n";
  s += "<text x=\"" + std::to_string(kLabelWidth - 10) +
       "\" y=\"36\" text-anchor=\"end\" font-size=\"12\" fill=\"#555\">tokens</text>\n";
  for (int i = 0; i < cols; ++i) {
    s += "<text x=\"" + std::to_string(kLabelWidth + i * kCellWidth + kCellWidth / 2) +
         "\" y=\"36\" text-anchor=\"middle\" font-size=\"12\" font-weight=\"600\">" +
         HtmlEscape(FormatPosition(g.positions[static_cast<size_t>(i)])) + "</text>\n";
  }
  for (int r = 0; r < rows; ++r) {
    const int64_t len = g.lengths[static_cast<size_t>(r)];
    const int y = kHeaderHeight + r * kCellHeight;
    s += "<text x=\"" + std::to_string(kLabelWidth - 10) + "\" y=\"" +
         std::to_string(y + kCellHeight / 2 + 4) +
         "\" text-anchor=\"end\" font-size=\"12\" font-weight=\"600\">" + FormatThousands(len) +
         "</text>\n";
    for (int i = 0; i < cols; ++i) {
      const HeatmapCell* cell = CellAt(g, len, g.positions[static_cast<size_t>(i)]);
      if (cell == nullptr) continue;
      const int x = kLabelWidth + i * kCellWidth;
      std::string fill = kNoAnswerFill, ink = "#1f1f1f";
      if (cell->trials > 0) {
        const double rate = static_cast<double>(cell->passes) / static_cast<double>(cell->trials);
        fill = PassRateColor(rate);
        ink = TextColorOn(rate);
      }
      const Interval ci = ClopperPearsonInterval(
          static_cast<double>(cell->passes), static_cast<double>(cell->trials), b.cell_confidence);
      s += "<g class=\"cell\"><title>" +
           HtmlEscape(CellTooltip(*cell) + "; verdict: " +
                      std::string(
                          VerdictName(CellVerdictOf(b, len, g.positions[static_cast<size_t>(i)]))) +
                      " (" + CiLabel(b.cell_confidence) + " " + FormatFraction(ci.lo) + "-" +
                      FormatFraction(ci.hi) + ")") +
           "</title>";
      s += "<rect x=\"" + std::to_string(x + 1) + "\" y=\"" + std::to_string(y + 1) +
           "\" width=\"" + std::to_string(kCellWidth - 2) + "\" height=\"" +
           std::to_string(kCellHeight - 2) + "\" rx=\"3\" fill=\"" + fill + "\"/>";
      s += "<text x=\"" + std::to_string(x + kCellWidth / 2) + "\" y=\"" +
           std::to_string(y + kCellHeight / 2 + 4) +
           "\" text-anchor=\"middle\" font-size=\"12\" fill=\"" + ink + "\">" +
           HtmlEscape(CellText(cell) + VerdictMark(b, len, g.positions[static_cast<size_t>(i)])) +
           "</text></g>\n";
    }
    std::string marker;
    if (b.found_up_to && *b.found_up_to == len) {
      marker = "\u2190 found at every position up to here";
    }
    if (b.lost_from && *b.lost_from == len) marker = "\u2190 lost from here";
    if (b.nearest_undecided && *b.nearest_undecided == len) marker = "\u2190 undecided";
    if (!marker.empty()) {
      s += "<text class=\"marker\" x=\"" + std::to_string(kLabelWidth + cols * kCellWidth + 8) +
           "\" y=\"" + std::to_string(y + kCellHeight / 2 + 4) + "\" font-size=\"12\" fill=\"" +
           (b.lost_from && *b.lost_from == len       ? "#b2182b"
            : b.found_up_to && *b.found_up_to == len ? "#1a7340"
                                                     : "#8a6d00") +
           "\">" + marker + "</text>\n";
    }
    if (b.lost_from && *b.lost_from == len && r > 0) {
      s += "<line class=\"boundary-line\" x1=\"" + std::to_string(kLabelWidth - 4) + "\" x2=\"" +
           std::to_string(kLabelWidth + cols * kCellWidth + 4) + "\" y1=\"" + std::to_string(y) +
           "\" y2=\"" + std::to_string(y) +
           "\" stroke=\"#b2182b\" stroke-width=\"2\" stroke-dasharray=\"6 4\"/>\n";
    }
  }
  s += "</svg>\n";
  return s;
}

// A stacked bar of the outcome counts, with a tooltip per segment.
std::string OutcomeBar(const std::array<int64_t, 6>& counts) {
  int64_t total = 0;
  for (int64_t n : counts) total += n;
  constexpr int kWidth = 600, kHeight = 18;
  std::string s = "<svg class=\"outcome-bar\" width=\"" + std::to_string(kWidth) + "\" height=\"" +
                  std::to_string(kHeight) + "\" viewBox=\"0 0 " + std::to_string(kWidth) + " " +
                  std::to_string(kHeight) + "\">";
  if (total == 0) {
    s += "<rect x=\"0\" y=\"0\" width=\"" + std::to_string(kWidth) + "\" height=\"" +
         std::to_string(kHeight) + "\" fill=\"" + kNoAnswerFill + "\"/></svg>\n";
    return s;
  }
  double x = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == 0) continue;
    const double w = kWidth * static_cast<double>(counts[i]) / static_cast<double>(total);
    s += "<rect x=\"" + Num(x) + "\" y=\"0\" width=\"" + Num(w) + "\" height=\"" +
         std::to_string(kHeight) + "\" fill=\"" + kOutcomeColors[i] + "\"><title>" +
         std::string(OutcomeName(kOutcomeOrder[i])) + ": " + FormatThousands(counts[i]) + " (" +
         FormatPercent(counts[i], total) + ")</title></rect>";
    x += w;
  }
  s += "</svg>\n";
  return s;
}

std::string OutcomeTable(const std::array<int64_t, 6>& counts) {
  std::string s = "<table class=\"outcomes\"><tr>";
  for (size_t i = 0; i < kOutcomeOrder.size(); ++i) {
    s += "<th class=\"num\"><span class=\"swatch\" style=\"background:" +
         std::string(kOutcomeColors[i]) + "\"></span>" +
         std::string(OutcomeName(kOutcomeOrder[i])) + "</th>";
  }
  s += "</tr>\n<tr>";
  for (int64_t n : counts) s += "<td class=\"num\">" + FormatThousands(n) + "</td>";
  s += "</tr></table>\n";
  return s;
}

std::string ProbeTable(const std::vector<LayerProbeStats>& probes) {
  std::string s =
      "<table class=\"probes\"><tr><th class=\"num\">indexer layer</th>"
      "<th class=\"num\">needle in the top-k at the last prompt position</th>"
      "<th class=\"num\">median rank (question and answer positions)</th><th class=\"num\">best "
      "rank</th>"
      "<th class=\"num\">needle visible</th></tr>\n";
  for (const LayerProbeStats& p : probes) {
    s += "<tr><td class=\"num\">" + std::to_string(p.layer) + "</td><td class=\"num\">" +
         FormatThousands(p.in_topk_last) + "/" + FormatThousands(p.answers) + " (" +
         FormatPercent(p.in_topk_last, p.answers) + ")</td><td class=\"num\">" +
         (p.median_rank ? FormatNumber(*p.median_rank) : std::string("-")) +
         "</td><td class=\"num\">" +
         (p.best_rank ? FormatThousands(*p.best_rank) : std::string("-")) +
         "</td><td class=\"num\">" + FormatThousands(p.visible) + "/" + FormatThousands(p.answers) +
         "</td></tr>\n";
  }
  s += "</table>\n";
  return s;
}

// Why jobs ended without an answer: a list, or "" when nothing failed.
std::string FailureList(const std::vector<FailureReason>& failures) {
  if (failures.empty()) return "";
  std::string s = "<ul class=\"failures\">\n";
  for (const std::string& line : DescribeFailures(failures)) {
    s += "<li>" + HtmlEscape(line) + "</li>\n";
  }
  return s + "</ul>\n";
}

std::string BoundaryClass(const ConfigBoundary& b) {
  if (b.lost_from) return "boundary lost";
  if (b.found_up_to && b.found_up_to == b.max_length()) return "boundary found";
  return "boundary";
}

// A verdict-named length with its pooled counts at the length level.
std::string LengthCell(const ConfigBoundary& b, const std::optional<int64_t>& length) {
  if (!length) return "<td class=\"num\">-</td>";
  for (const LengthSummary& l : b.lengths) {
    if (l.length != *length) continue;
    const Interval ci = ClopperPearsonInterval(static_cast<double>(l.passes),
                                               static_cast<double>(l.trials), b.length_confidence);
    return "<td class=\"num\">" + FormatThousands(*length) + " <small>(" +
           FormatThousands(l.passes) + "/" + FormatThousands(l.trials) + ", " +
           CiLabel(b.length_confidence) + " " + FormatFraction(ci.lo) + "-" +
           FormatFraction(ci.hi) + ")</small></td>";
  }
  return "<td class=\"num\">" + FormatThousands(*length) + "</td>";
}

std::string UndecidedCell(const ConfigBoundary& b) {
  if (b.undecided.empty()) return "<td class=\"num\">-</td>";
  std::string s;
  for (int64_t l : b.undecided) s += (s.empty() ? "" : ", ") + FormatThousands(l);
  return "<td class=\"num\">" + s + "</td>";
}

}  // namespace

std::string HtmlEscape(const std::string& s) { return EscapeMarkup(s, Markup::kHtml); }

std::string PassRateColor(double rate) {
  rate = std::clamp(std::isnan(rate) ? 0.0 : rate, 0.0, 1.0);
  // Three stops: red (0), amber (0.5), green (1), linear in RGB between them.
  struct Rgb {
    double r, g, b;
  };
  constexpr Rgb kRed{215, 48, 39}, kAmber{254, 224, 139}, kGreen{26, 152, 80};
  const Rgb& a = rate < 0.5 ? kRed : kAmber;
  const Rgb& z = rate < 0.5 ? kAmber : kGreen;
  const double t = rate < 0.5 ? rate / 0.5 : (rate - 0.5) / 0.5;
  auto mix = [t](double x, double y) { return static_cast<int>(std::lround(x + (y - x) * t)); };
  char buf[8];
  std::snprintf(buf, sizeof(buf), "#%02x%02x%02x", mix(a.r, z.r), mix(a.g, z.g), mix(a.b, z.b));
  return buf;
}

std::string RenderHtml(const CampaignReport& r) {
  std::string s;
  s += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  s += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  s += "<title>needlework report: " + HtmlEscape(r.campaign.name) + "</title>\n";
  s += "<style>" + std::string(kStyle) + "</style>\n</head>\n<body>\n";
  s += "<h1>Campaign <code>" + HtmlEscape(r.campaign.name) + "</code></h1>\n";
  s += "<p class=\"meta\">";
  if (!r.campaign.source_path.empty()) {
    s += "Source: <code>" + HtmlEscape(r.campaign.source_path) + "</code>. ";
  }
  s += "Jobs: " + HtmlEscape(ProgressLine(r.progress)) + ".";
  if (r.gpu_busy) s += " " + HtmlEscape(GpuBusyLine(*r.gpu_busy)) + ".";
  s += "</p>\n";
  s += "<p class=\"meta\">Criterion: " + HtmlEscape(r.criterion.ToString()) +
       ". Found: the exact (Clopper-Pearson) interval lies at or above the pass rate; lost: below "
       "it; undecided: it straddles it.</p>\n";
  s += "<h3>Outcomes</h3>\n" + OutcomeBar(r.outcomes) + OutcomeTable(r.outcomes);
  if (!r.failures.empty()) s += "<h3>Without an answer</h3>\n" + FailureList(r.failures);
  if (r.configs.empty()) {
    s += "<p>No results yet.</p>\n</body>\n</html>\n";
    return s;
  }
  s += "<h2>Summary</h2>\n<table class=\"summary\"><tr><th>configuration</th>"
       "<th class=\"num\">found at every position up to</th><th class=\"num\">lost from</th>"
       "<th class=\"num\">undecided</th><th class=\"num\">passes/answers</th><th>boundary</th>"
       "</tr>\n";
  for (size_t i = 0; i < r.configs.size(); ++i) {
    const ConfigBoundary& b = r.configs[i].boundary;
    s += "<tr><td><a href=\"#config-" + std::to_string(i) + "\"><code>" + HtmlEscape(b.config) +
         "</code></a></td>" + LengthCell(b, b.found_up_to) + LengthCell(b, b.lost_from) +
         UndecidedCell(b) + "<td class=\"num\">" + FormatThousands(b.passes) + "/" +
         FormatThousands(b.trials) + "</td><td>" + HtmlEscape(DescribeBoundary(b)) + "</td></tr>\n";
  }
  s += "</table>\n";
  for (size_t i = 0; i < r.configs.size(); ++i) {
    const ConfigReport& c = r.configs[i];
    s += "<section class=\"config\" id=\"config-" + std::to_string(i) + "\">\n";
    s += "<h2><code>" + HtmlEscape(c.boundary.config) + "</code></h2>\n";
    s += "<p class=\"" + BoundaryClass(c.boundary) + "\">" +
         HtmlEscape(DescribeBoundary(c.boundary)) + ".</p>\n";
    s += "<h3>Heatmap: passes/answers per context length and needle position</h3>\n";
    s += Heatmap(c);
    s += "<h3>Outcomes</h3>\n" + OutcomeBar(c.outcomes) + OutcomeTable(c.outcomes);
    if (!c.failures.empty()) s += "<h3>Without an answer</h3>\n" + FailureList(c.failures);
    if (!c.probes.empty()) {
      s += "<h3>Indexer probes</h3>\n" + ProbeTable(c.probes);
    }
    s += "</section>\n";
  }
  s += "<div class=\"legend\"><p>Cells: passes/answers, coloured from red (none passed) through "
       "amber to green (all passed); grey: no answers. eN = N runs without an answer "
       "(engine_error, timeout, truncated, empty: never counted as misses); fN = N jobs failed "
       "(retries used up, no result); pN = N jobs pending. "
       "After the counts, the cell's verdict: + found, x lost, ? undecided. Hover a cell for its "
       "counts, verdict and exact interval at the cell level.</p>"
       "<p>Whole campaign: " +
       HtmlEscape(OutcomeList(r.outcomes)) +
       ".</p><p>Written by <code>nw report --format html</code>.</p></div>\n";
  s += "</body>\n</html>\n";
  return s;
}

}  // namespace nw::report
