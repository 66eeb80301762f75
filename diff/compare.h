// `nw diff`'s comparison: two traced runs of the same prompt (traced_run.h) compared per layer
// (cosine and max relative error of the attention output and of the residual streams after the
// block), per indexer layer and position band (mean top-k Jaccard), and at the head (logits:
// cosine and max relative error per row; greedy agreement); then, over every prompt, the first
// layer / component where the two part by the stated thresholds, in forward order:
//   hidden(l-1) -> indexer(l) -> attn(l) -> hidden(l) -> ... -> logits -> greedy.
// Side A is the reference: relative errors are max|a - b| / max|a| over the tensor (per row for
// logits, relative to the row's largest |logit|).
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "diff/traced_run.h"

namespace nw::diff {

struct DiffThresholds {
  double max_rel_error = 1e-4;  // attn, hidden and logits: parted when the error is above
  double min_jaccard = 0.99;    // indexer: parted when a band's mean Jaccard is below
  double min_greedy = 1.0;      // greedy agreement: parted when the fraction is below
};

/// The position bands of the Jaccard columns: the prompt in quarters, then the decode steps.
inline constexpr int kBands = 5;
inline constexpr const char* kBandNames[kBands] = {"0-25%", "25-50%", "50-75%", "75-100%",
                                                   "decode"};

struct TensorDiff {
  double cosine = 1;         // over the whole [tokens, width] tensor
  double max_rel_error = 0;  // max |a - b| / max |a|
};

struct LayerDiff {
  int layer = 0;
  int ratio = 0;
  TensorDiff attn, hidden;
  bool indexer = false;                    // a ratio-4 layer (the Jaccard columns)
  std::vector<double> jaccard;             // per band, mean over positions (-1: no position)
  std::vector<int64_t> jaccard_positions;  // per band, positions compared
};

struct PromptDiff {
  std::string name;
  int64_t prompt_tokens = 0;
  int steps = 0;
  std::vector<LayerDiff> layers;
  TensorDiff logits;  // cosine over every row; max_rel_error: the worst row
  int greedy_agree = 0;
  int greedy_total = 0;
};

struct Divergence {
  int layer = -1;         // -1 for logits and greedy
  std::string component;  // indexer | attn | hidden | logits | greedy
  std::string prompt;     // the prompt where it parts first
  std::string band;       // indexer only
  double value = 0;       // the metric that crossed its threshold
  std::string metric;     // "max relative error", "top-k Jaccard", "greedy agreement"
  double threshold = 0;
};

struct DiffReport {
  DiffConfig a, b;
  std::string a_digest, b_digest;
  std::string prompts_source;  // where the prompts came from, one line
  int steps = 0;
  int topk = 0;  // the effective top-k (0 = the model's)
  DiffThresholds thresholds;
  std::vector<PromptDiff> prompts;
  std::vector<LayerDiff> layers;  // over every prompt: worst cosine and error, mean Jaccard
  TensorDiff logits;              // worst over the prompts
  int greedy_agree = 0, greedy_total = 0;
  std::optional<Divergence> first;  // none: the configurations agree within the thresholds

  /// 0: agree within the thresholds; 1: they part (first is set).
  int exit_code() const { return first ? 1 : 0; }
};

/// Compares A's run with B's run of one prompt (B fed A's tokens). FailedPrecondition when the
/// traces do not line up (different layer counts, widths or token counts).
Result<PromptDiff> ComparePrompt(const std::string& name, int64_t prompt_tokens,
                                 const ModelConfig& model, const DiffSide::Run& a,
                                 const DiffSide::Run& b);

/// Fills report.layers, logits, greedy totals and first from report.prompts.
void Summarize(DiffReport& report);

}  // namespace nw::diff
