// `nw diff` end to end over loaded sides: every prompt through A (greedy) and B (fed A's tokens),
// compared (compare.h) and summarized. Thread-safety: one thread (the sides are stateful).
#pragma once

#include <string>
#include <vector>

#include "diff/compare.h"
#include "diff/prompts.h"
#include "diff/traced_run.h"

namespace nw::diff {

struct DiffOptions {
  int steps = 8;  // decode steps after each prompt
  int topk = 0;   // 0 = the model's index_topk
  DiffThresholds thresholds;
  std::string prompts_source;  // one line for the report
};

/// FailedPrecondition when the two sides' models differ in vocabulary or shape (their traces
/// could not line up); the engine's errors otherwise, named by side and prompt.
Result<DiffReport> RunDiff(DiffSide& a, DiffSide& b, const std::vector<DiffPrompt>& prompts,
                           const DiffOptions& options);

}  // namespace nw::diff
