// Verdicts on a pass rate against a stated criterion: is the needle FOUND (the exact
// Clopper-Pearson interval lies at or above the threshold), LOST (it lies below) or UNDECIDED (it
// straddles the threshold)? Reports, the boundary search and the release gate all decide with
// these functions, so they agree on what "found" and "lost" mean. The exact interval, not
// Wilson's, decides because its coverage holds at every n: a verdict is never decided on
// evidence that cannot support it at the stated level (0/1 at 95 % is [0, 0.975]: undecided at
// 0.9, where Wilson's [0, 0.79] would call it lost). docs/reports.md ("Verdicts") gives the rules
// and how the report controls for many cells.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/clopper_pearson.h"
#include "common/status.h"

namespace nw {

/// A campaign's criterion (`criterion: {pass_rate: 0.9, confidence: 0.95}`).
struct Criterion {
  double pass_rate = 0.9;    // the threshold: retrieval "works" at a length when its rate >= this
  double confidence = 0.95;  // two-sided level of the interval a single verdict uses
  /// InvalidArgument unless 0 < pass_rate < 1 and 0.5 <= confidence < 1.
  Status Validate() const;
  /// "pass rate >= 0.9 at 95% confidence".
  std::string ToString() const;
};

enum class Verdict {
  kNoAnswers,  // no pass or miss at all (only errors, or pending): nothing to decide on
  kFound,      // Clopper-Pearson lower bound >= pass_rate
  kLost,       // Clopper-Pearson upper bound < pass_rate
  kUndecided,  // the interval straddles pass_rate
};
/// "no answers", "found", "lost", "undecided".
std::string_view VerdictName(Verdict v);

/// z of a two-sided interval at `confidence` (0 < confidence < 1): 0.95 -> 1.959964.
/// Out of range gives +inf (every interval [0, 1]).
double TwoSidedZFor(double confidence);

/// The verdict on `passes` out of `trials` answers, with the Clopper-Pearson interval at
/// `confidence` (two-sided) against `pass_rate`. At 0.9 / 0.95: 9/10 and 0/1 are undecided,
/// 36/36 found (35/35 not), 0/2 lost.
Verdict Decide(int64_t passes, int64_t trials, double pass_rate, double confidence);
inline Verdict Decide(int64_t passes, int64_t trials, const Criterion& c) {
  return Decide(passes, trials, c.pass_rate, c.confidence);
}

/// How many answers in all an undecided count would need to be decided if the pass rate stayed
/// at the one observed: the smallest N >= trials for which the Clopper-Pearson interval at
/// `confidence`, computed with N answers and N * passes / trials passes (fractional: the beta
/// quantiles are continuous in it), clears pass_rate (lower bound >= it, or upper bound below
/// it); Decide on that many answers at that rate agrees wherever N * passes / trials is whole.
/// nullopt when no N up to `limit` does, e.g. when the observed rate equals the threshold (9/10 at
/// 0.9 never clears it). For a count already decided: `trials`.
std::optional<int64_t> TrialsToDecide(int64_t passes, int64_t trials, double pass_rate,
                                      double confidence, int64_t limit = 1'000'000);

/// The per-test confidence that keeps `tests` tests together at `confidence` (Bonferroni):
/// 1 - (1 - confidence) / tests. tests <= 1 gives `confidence`.
double BonferroniConfidence(double confidence, int64_t tests);

}  // namespace nw
