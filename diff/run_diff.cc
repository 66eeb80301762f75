#include "diff/run_diff.h"

namespace nw::diff {

Result<DiffReport> RunDiff(DiffSide& a, DiffSide& b, const std::vector<DiffPrompt>& prompts,
                           const DiffOptions& options) {
  const ModelConfig &ma = a.model(), &mb = b.model();
  if (ma.vocab_size != mb.vocab_size || ma.n_layers != mb.n_layers || ma.dim != mb.dim ||
      ma.hc_mult != mb.hc_mult || ma.compress_ratios != mb.compress_ratios) {
    return Status::FailedPrecondition(
        "the models of A and B differ in vocabulary, layers, hidden size or compress ratios; "
        "nw diff compares two configurations of one model shape");
  }
  if (options.steps < 0) return Status::InvalidArgument("--steps: must be >= 0");
  DiffReport r;
  r.a = a.config();
  r.b = b.config();
  r.a_digest = a.model_digest();
  r.b_digest = b.model_digest();
  r.prompts_source = options.prompts_source;
  r.steps = options.steps;
  r.topk = options.topk;
  r.thresholds = options.thresholds;
  for (const DiffPrompt& p : prompts) {
    Result<DiffSide::Run> ra = a.Go(p.tokens, options.steps, options.topk, {});
    if (!ra.ok()) return ra.status().WithContext("A, " + p.name);
    Result<DiffSide::Run> rb = b.Go(p.tokens, options.steps, options.topk, ra->fed);
    if (!rb.ok()) return rb.status().WithContext("B, " + p.name);
    NW_ASSIGN_OR_RETURN(PromptDiff d,
                        ComparePrompt(p.name, static_cast<int64_t>(p.tokens.size()), ma, *ra, *rb));
    r.prompts.push_back(std::move(d));
  }
  Summarize(r);
  return r;
}

}  // namespace nw::diff
