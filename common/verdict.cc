#include "common/verdict.h"

#include <cmath>
#include <cstdio>
#include <limits>

namespace nw {
namespace {

std::string Pct(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", v * 100.0);
  return buf;
}

}  // namespace

Status Criterion::Validate() const {
  if (!(pass_rate > 0.0 && pass_rate < 1.0)) {
    return Status::InvalidArgument("pass_rate must be greater than 0 and less than 1");
  }
  if (!(confidence >= 0.5 && confidence < 1.0)) {
    return Status::InvalidArgument("confidence must be at least 0.5 and less than 1");
  }
  return Status::Ok();
}

std::string Criterion::ToString() const {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4g", pass_rate);
  return "pass rate >= " + std::string(buf) + " at " + Pct(confidence) + "% confidence";
}

std::string_view VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kNoAnswers:
      return "no answers";
    case Verdict::kFound:
      return "found";
    case Verdict::kLost:
      return "lost";
    case Verdict::kUndecided:
      return "undecided";
  }
  return "undecided";
}

double TwoSidedZFor(double confidence) {
  if (!(confidence > 0.0 && confidence < 1.0)) return std::numeric_limits<double>::infinity();
  // Solve erfc(z / sqrt 2) = 1 - confidence by bisection (erfc is decreasing).
  const double target = 1.0 - confidence;
  double a = 0, b = 40;
  for (int i = 0; i < 200; ++i) {
    const double m = (a + b) / 2;
    if (std::erfc(m / std::sqrt(2.0)) > target) {
      a = m;
    } else {
      b = m;
    }
  }
  return (a + b) / 2;
}

Verdict Decide(int64_t passes, int64_t trials, double pass_rate, double confidence) {
  if (trials <= 0) return Verdict::kNoAnswers;
  const Interval ci =
      ClopperPearsonInterval(static_cast<double>(passes), static_cast<double>(trials), confidence);
  if (ci.lo >= pass_rate) return Verdict::kFound;
  if (ci.hi < pass_rate) return Verdict::kLost;
  return Verdict::kUndecided;
}

std::optional<int64_t> TrialsToDecide(int64_t passes, int64_t trials, double pass_rate,
                                      double confidence, int64_t limit) {
  if (trials <= 0) return std::nullopt;
  if (Decide(passes, trials, pass_rate, confidence) != Verdict::kUndecided) return trials;
  const double p = static_cast<double>(passes) / static_cast<double>(trials);
  if (p == pass_rate) return std::nullopt;
  auto clears = [&](int64_t n) {
    const auto nn = static_cast<double>(n);
    const Interval ci = ClopperPearsonInterval(p * nn, nn, confidence);
    return p > pass_rate ? ci.lo >= pass_rate : ci.hi < pass_rate;
  };
  // The interval narrows as N grows at a fixed rate: find the first N that clears by doubling,
  // then bisect.
  int64_t lo = trials, hi = trials;
  while (!clears(hi)) {
    if (hi >= limit) return std::nullopt;
    lo = hi;
    hi = std::min(limit, hi * 2);
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (clears(mid)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi;
}

double BonferroniConfidence(double confidence, int64_t tests) {
  if (tests <= 1) return confidence;
  return 1.0 - (1.0 - confidence) / static_cast<double>(tests);
}

}  // namespace nw
