// Hypothesis tests for the release gate: the standard normal distribution, exact binomial tails,
// the exact (conditional) McNemar test on discordant pairs, the Newcombe hybrid-score interval
// for a difference of two independent proportions (built from Wilson intervals), and the Holm
// step-down adjustment for testing many cells at once. All one-sided tests here ask "is the first
// proportion larger than the second?", i.e. "did the candidate lose passes the baseline had?".
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "report/stats.h"

namespace nw::report {

/// Phi(x), the standard normal CDF.
double NormalCdf(double x);
/// Phi^-1(p) for 0 < p < 1 (Acklam's rational approximation refined by one Halley step; about
/// 1e-15 relative error). Returns -inf / +inf for p <= 0 / p >= 1.
double NormalQuantile(double p);
/// z of a one-sided test at level alpha: Phi^-1(1 - alpha). 0.05 -> 1.644854.
double OneSidedZ(double alpha);

/// One-sided Wilson bounds at confidence 1 - alpha (z = OneSidedZ(alpha)). For all-pass n = 10,
/// 50, 100 at alpha = 0.05 the lower bound is n / (n + z^2) = 0.787, 0.949, 0.974.
double WilsonLowerOneSided(int64_t successes, int64_t n, double alpha);
double WilsonUpperOneSided(int64_t successes, int64_t n, double alpha);

/// P(X >= k) for X ~ Binomial(n, p), computed in log space (exact to rounding for any n).
double BinomialUpperTail(int64_t k, int64_t n, double p);

/// Exact McNemar test, one-sided, on paired binary outcomes. `b` = pairs where the first member
/// passed and the second failed, `c` = the reverse (concordant pairs carry no information).
/// Under H0 (equal pass probabilities) each discordant pair goes either way with probability
/// 1/2, so the p-value for "the first is better" is P(X >= b), X ~ Binomial(b + c, 1/2).
/// b = c = 0 gives 1.
double McNemarExactOneSided(int64_t b, int64_t c);
/// Two-sided exact McNemar: min(1, 2 * min(P(X >= b), P(X <= b))).
double McNemarExactTwoSided(int64_t b, int64_t c);

/// Newcombe's hybrid score interval (his method 10) for p1 - p2 with p1 = k1/n1, p2 = k2/n2
/// independent: with Wilson intervals [l1, u1] and [l2, u2] at the same z,
///   lower = d - sqrt((p1 - l1)^2 + (u2 - p2)^2),  upper = d + sqrt((u1 - p1)^2 + (p2 - l2)^2).
Interval NewcombeDifference(int64_t k1, int64_t n1, int64_t k2, int64_t n2, double z);
/// One-sided p-value of "p1 > p2" from the Newcombe interval: the alpha at which the one-sided
/// lower bound of p1 - p2 reaches 0 (found by bisection on z). d = 0 gives 0.5; d < 0 gives
/// 1 - (the p-value of "p2 > p1"). Either n = 0 gives 1.
double NewcombeOneSidedP(int64_t k1, int64_t n1, int64_t k2, int64_t n2);

/// Holm's step-down adjustment: adjusted p-values in the input order. Rejecting where the
/// adjusted p < alpha keeps the family-wise error rate at alpha over all the tests.
std::vector<double> HolmAdjust(const std::vector<double>& p);

}  // namespace nw::report
