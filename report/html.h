// The campaign report as one self-contained HTML page: inline CSS and inline SVG only (no
// scripts, fonts, images or links to fetch), so it can be mailed, attached to a CI run or opened
// from disk with no network. It shows the same data as the text, Markdown and JSON renderers
// (report/report.h): per configuration the boundary sentence with Wilson intervals, an SVG
// length x position heatmap coloured by pass rate (each cell's tooltip gives its counts and
// interval), the outcome breakdown and the indexer probe table.
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "report/report.h"

namespace nw::report {

/// The whole page, starting with <!DOCTYPE html>.
std::string RenderHtml(const CampaignReport& r);

/// Escapes &, <, >, " and ' for HTML text, attribute values and SVG <title> text.
std::string HtmlEscape(const std::string& s);

/// The fill of a heatmap cell with answers: red (rate 0) through amber (0.5) to green (1), as
/// "#rrggbb". Cells without answers are grey (kNoAnswerFill).
std::string PassRateColor(double rate);
inline constexpr const char* kNoAnswerFill = "#d9d9d9";

}  // namespace nw::report
