// The Wilson score interval for a pass rate: what reports print, what the boundary search uses
// to decide when two lengths are told apart, and what the gate's Wilson bounds are.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace nw {

/// z for a two-sided 95% interval (the 0.975 quantile of the standard normal).
inline constexpr double kZ95 = 1.959963984540054;

struct Interval {
  double lo = 0;
  double hi = 1;
};

/// Wilson score interval for `successes` out of `n` trials:
///   center = (p + z^2/(2n)) / (1 + z^2/n),
///   half   = z * sqrt(p(1-p)/n + z^2/(4n^2)) / (1 + z^2/n),  p = successes / n,
/// clamped to [0, 1]. Two-sided 95% with the default z: 10/10 gives [0.7225, 1]. n = 0 gives
/// [0, 1] (no information).
Interval WilsonInterval(int64_t successes, int64_t n, double z = kZ95);

}  // namespace nw
