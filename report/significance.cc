#include "report/significance.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>

namespace nw::report {

double NormalCdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

double NormalQuantile(double p) {
  if (p <= 0.0) return -std::numeric_limits<double>::infinity();
  if (p >= 1.0) return std::numeric_limits<double>::infinity();
  // P. J. Acklam's rational approximation (relative error < 1.15e-9) ...
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                 -2.759285104469687e+02, 1.383577518672690e+02,
                                 -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                 -1.556989798598866e+02, 6.680131188771972e+01,
                                 -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                 -2.400758277161838e+00, -2.549732539343734e+00,
                                 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                 2.445134137142996e+00, 3.754408661907416e+00};
  constexpr double kLow = 0.02425;
  double x = 0;
  if (p < kLow) {
    const double q = std::sqrt(-2.0 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  } else if (p <= 1.0 - kLow) {
    const double q = p - 0.5;
    const double r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
  } else {
    const double q = std::sqrt(-2.0 * std::log(1.0 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  }
  // ... refined by one step of Halley's method on Phi(x) - p.
  const double e = NormalCdf(x) - p;
  const double u = e * std::sqrt(2.0 * std::numbers::pi) * std::exp(x * x / 2.0);
  return x - u / (1.0 + x * u / 2.0);
}

double OneSidedZ(double alpha) { return NormalQuantile(1.0 - alpha); }

double WilsonLowerOneSided(int64_t successes, int64_t n, double alpha) {
  return WilsonInterval(successes, n, OneSidedZ(alpha)).lo;
}

double WilsonUpperOneSided(int64_t successes, int64_t n, double alpha) {
  return WilsonInterval(successes, n, OneSidedZ(alpha)).hi;
}

double BinomialUpperTail(int64_t k, int64_t n, double p) {
  if (k <= 0) return 1.0;
  if (k > n) return 0.0;
  if (p <= 0.0) return 0.0;
  if (p >= 1.0) return 1.0;
  const double lp = std::log(p), lq = std::log1p(-p);
  const double lgn = std::lgamma(static_cast<double>(n) + 1.0);
  // Sum the terms from the largest down so the log-sum-exp is stable.
  std::vector<double> logs;
  logs.reserve(static_cast<size_t>(n - k + 1));
  for (int64_t i = k; i <= n; ++i) {
    const double di = static_cast<double>(i);
    logs.push_back(lgn - std::lgamma(di + 1.0) - std::lgamma(static_cast<double>(n - i) + 1.0) +
                   di * lp + static_cast<double>(n - i) * lq);
  }
  const double mx = *std::max_element(logs.begin(), logs.end());
  double sum = 0;
  for (double l : logs) sum += std::exp(l - mx);
  return std::min(1.0, std::exp(mx) * sum);
}

double McNemarExactOneSided(int64_t b, int64_t c) {
  if (b < 0 || c < 0) return 1.0;
  return BinomialUpperTail(b, b + c, 0.5);
}

double McNemarExactTwoSided(int64_t b, int64_t c) {
  if (b < 0 || c < 0 || b + c == 0) return 1.0;
  const double upper = BinomialUpperTail(b, b + c, 0.5);  // P(X >= b)
  const double lower = BinomialUpperTail(c, b + c, 0.5);  // P(X <= b) = P(Y >= c), Y = n - X
  return std::min(1.0, 2.0 * std::min(upper, lower));
}

Interval NewcombeDifference(int64_t k1, int64_t n1, int64_t k2, int64_t n2, double z) {
  if (n1 <= 0 || n2 <= 0) return {-1.0, 1.0};
  const double p1 = static_cast<double>(k1) / static_cast<double>(n1);
  const double p2 = static_cast<double>(k2) / static_cast<double>(n2);
  const Interval w1 = WilsonInterval(k1, n1, z), w2 = WilsonInterval(k2, n2, z);
  const double d = p1 - p2;
  const double lo = d - std::sqrt((p1 - w1.lo) * (p1 - w1.lo) + (w2.hi - p2) * (w2.hi - p2));
  const double hi = d + std::sqrt((w1.hi - p1) * (w1.hi - p1) + (p2 - w2.lo) * (p2 - w2.lo));
  return {std::max(-1.0, lo), std::min(1.0, hi)};
}

double NewcombeOneSidedP(int64_t k1, int64_t n1, int64_t k2, int64_t n2) {
  if (n1 <= 0 || n2 <= 0) return 1.0;
  // d = p1 - p2 compared without division, to get d == 0 exactly.
  const int64_t cross = k1 * n2 - k2 * n1;
  if (cross == 0) return 0.5;
  if (cross < 0) return 1.0 - NewcombeOneSidedP(k2, n2, k1, n1);
  // The lower bound falls as z grows (both Wilson intervals widen): find z* where it is 0.
  auto lower = [&](double z) { return NewcombeDifference(k1, n1, k2, n2, z).lo; };
  double lo = 0.0, hi = 1.0;
  while (lower(hi) > 0.0 && hi < 64.0) hi *= 2.0;
  if (lower(hi) > 0.0) return 0.0;
  for (int i = 0; i < 200 && hi - lo > 1e-12; ++i) {
    const double mid = 0.5 * (lo + hi);
    (lower(mid) > 0.0 ? lo : hi) = mid;
  }
  return 1.0 - NormalCdf(0.5 * (lo + hi));
}

std::vector<double> HolmAdjust(const std::vector<double>& p) {
  const size_t m = p.size();
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  std::vector<double> out(m, 1.0);
  double running = 0.0;
  for (size_t rank = 0; rank < m; ++rank) {
    const size_t i = order[rank];
    const double adj = std::min(1.0, static_cast<double>(m - rank) * p[i]);
    running = std::max(running, adj);
    out[i] = running;
  }
  return out;
}

}  // namespace nw::report
