// `nw diff` output: the DiffReport (compare.h) as text (a terminal table), Markdown (for CI
// summaries) or JSON (every number, for scripts). Thread-safety: pure functions.
#pragma once

#include <string>

#include "diff/compare.h"

namespace nw::diff {

std::string RenderText(const DiffReport& r);
std::string RenderMarkdown(const DiffReport& r);
std::string RenderJson(const DiffReport& r);

}  // namespace nw::diff
