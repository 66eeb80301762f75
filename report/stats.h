// Small numeric helpers for reports: the Wilson score interval for a pass rate and the number
// formats used in every renderer (thousands separators, needle positions, rates).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

namespace nw::report {

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

/// 1234567 -> "1,234,567"; -4509 -> "-4,509".
std::string FormatThousands(int64_t v);
/// A needle position: a fraction 0..1 as a percentage ("0%", "33.3%", "100%"), a negative value
/// as a token offset from the end of the context ("end-512").
std::string FormatPosition(double position);
/// A number with at most `decimals` decimals and no trailing zeros ("4", "17.5").
std::string FormatNumber(double v, int decimals = 1);
/// "0.18" (two decimals), used for interval bounds.
std::string FormatFraction(double v);
/// passes / n as a whole percentage ("95%"); "-" when n is 0.
std::string FormatPercent(int64_t passes, int64_t n);

/// Orders strings with embedded numbers by value ("topk=8" before "topk=16").
bool NaturalLess(const std::string& a, const std::string& b);

}  // namespace nw::report
