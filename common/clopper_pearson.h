// The exact (Clopper-Pearson) interval for a pass rate: the interval that DECIDES verdicts
// (common/verdict.h). Unlike the Wilson interval (common/wilson.h), its coverage is at least the
// stated level for every n, which matters at tiny n: 0/1 at 95 % is [0, 0.975], so a single miss
// cannot show that a rate is below 0.9; Wilson's [0, 0.79] would.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "common/wilson.h"

namespace nw {

/// The two-sided Clopper-Pearson interval at `confidence` (0 < confidence < 1) for `successes`
/// out of `n` trials, from beta quantiles with alpha = 1 - confidence:
///   lo = Beta(alpha/2; k, n - k + 1)  (0 when k = 0),
///   hi = Beta(1 - alpha/2; k + 1, n - k)  (1 when k = n).
/// Equivalently lo is the p with P(X >= k | n, p) = alpha/2 and hi the p with
/// P(X <= k | n, p) = alpha/2. n <= 0 or a level outside (0, 1) gives [0, 1].
/// `successes` may be fractional (TrialsToDecide's "n answers at the observed rate"): the beta
/// quantiles are continuous in it and agree with the integer interval at whole counts.
Interval ClopperPearsonInterval(double successes, double n, double confidence);

}  // namespace nw
