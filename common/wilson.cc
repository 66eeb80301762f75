#include "common/wilson.h"

#include <algorithm>
#include <cmath>

namespace nw {

Interval WilsonInterval(int64_t successes, int64_t n, double z) {
  if (n <= 0) return {0.0, 1.0};
  successes = std::clamp<int64_t>(successes, 0, n);
  const double nn = static_cast<double>(n);
  const double p = static_cast<double>(successes) / nn;
  const double z2 = z * z;
  const double denom = 1.0 + z2 / nn;
  const double center = (p + z2 / (2.0 * nn)) / denom;
  const double half = z * std::sqrt(p * (1.0 - p) / nn + z2 / (4.0 * nn * nn)) / denom;
  Interval out{std::clamp(center - half, 0.0, 1.0), std::clamp(center + half, 0.0, 1.0)};
  // Exact ends: all-pass reaches 1 and none-pass reaches 0 (rounding can land a hair away).
  if (successes == n) out.hi = 1.0;
  if (successes == 0) out.lo = 0.0;
  return out;
}

}  // namespace nw
