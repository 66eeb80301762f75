// The gate's statistics: which test a cell gets (exact McNemar, Newcombe, or none), Holm over
// every tested cell and shift, each test's verdict, and the gate's decision and exit code
// (report/gate.h, points 3 and 5).
#include <cstdio>
#include <string>
#include <vector>

#include "report/gate.h"
#include "report/gate_internal.h"
#include "report/significance.h"

namespace nw::report::gate_internal {
namespace {

double Rate(const SideCounts& c) {
  return c.trials > 0 ? static_cast<double>(c.passes) / static_cast<double>(c.trials) : 0.0;
}

// The verdict of a tested GateTest after Holm.
void DecideOne(GateTest& t, const GateOptions& o) {
  if (t.method == GateMethod::kNone) return;
  const std::string evidence =
      t.method == GateMethod::kMcNemar
          ? "exact McNemar on " + std::to_string(t.pairs) + " pairs: " + std::to_string(t.lost) +
                " lost, " + std::to_string(t.gained) + " gained"
          : "Newcombe (Wilson) on " + FormatRate(t.baseline.passes, t.baseline.trials) + " vs " +
                FormatRate(t.candidate.passes, t.candidate.trials);
  const std::string ps = "p " + FormatP(t.p_regression) + ", Holm " + FormatP(t.p_adjusted) +
                         ", drop " + Signed(t.drop);
  if (t.p_adjusted < o.alpha && t.drop > o.tolerance) {
    t.verdict = GateVerdict::kRegression;
    t.reason = evidence + "; " + ps + " > tolerance " + FormatNumber(o.tolerance, 3);
  } else if (t.p_improvement_adjusted < o.alpha && -t.drop > o.tolerance) {
    t.verdict = GateVerdict::kImproved;
    t.reason = evidence + "; improvement p " + FormatP(t.p_improvement) + ", Holm " +
               FormatP(t.p_improvement_adjusted);
  } else {
    t.verdict = GateVerdict::kPass;
    t.reason = evidence + "; " + ps;
    if (t.p_adjusted < o.alpha) {
      t.reason += " (significant, within tolerance " + FormatNumber(o.tolerance, 3) + ")";
    }
  }
}

}  // namespace

std::string FormatP(double p) {
  if (p < 0.0001) return "<0.0001";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4f", p);
  return buf;
}

std::string FormatRate(int64_t passes, int64_t trials) {
  return std::to_string(passes) + "/" + std::to_string(trials);
}

std::string Signed(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%+.2f", v);
  return buf;
}

// Chooses the method and computes the unadjusted p-values (verdicts come after Holm).
void ChooseTest(GateTest& t, bool baseline_seen, bool candidate_seen, const GateOptions& o) {
  if (!baseline_seen || !candidate_seen) {
    t.method = GateMethod::kNone;
    t.verdict = GateVerdict::kInsufficient;
    t.reason = !baseline_seen ? "not tested by the baseline" : "not tested by the candidate";
    return;
  }
  if (t.pairs >= o.min_trials) {
    t.method = GateMethod::kMcNemar;
    t.drop = static_cast<double>(t.lost - t.gained) / static_cast<double>(t.pairs);
    t.p_regression = McNemarExactOneSided(t.lost, t.gained);
    t.p_improvement = McNemarExactOneSided(t.gained, t.lost);
    return;
  }
  if (t.baseline.trials >= o.min_trials && t.candidate.trials >= o.min_trials) {
    t.method = GateMethod::kNewcombe;
    t.drop = Rate(t.baseline) - Rate(t.candidate);
    t.p_regression = NewcombeOneSidedP(t.baseline.passes, t.baseline.trials, t.candidate.passes,
                                       t.candidate.trials);
    t.p_improvement = NewcombeOneSidedP(t.candidate.passes, t.candidate.trials, t.baseline.passes,
                                        t.baseline.trials);
    return;
  }
  t.method = GateMethod::kNone;
  t.verdict = GateVerdict::kInsufficient;
  t.reason = "too few answers: baseline " + std::to_string(t.baseline.trials) + ", candidate " +
             std::to_string(t.candidate.trials) + ", pairs " + std::to_string(t.pairs) + " (min " +
             std::to_string(o.min_trials) + ")";
}

void DecideTests(const std::vector<GateTest*>& family, const GateOptions& o) {
  std::vector<double> pr, pi;
  for (GateTest* t : family) {
    pr.push_back(t->p_regression);
    pi.push_back(t->p_improvement);
  }
  const std::vector<double> ar = HolmAdjust(pr), ai = HolmAdjust(pi);
  for (size_t i = 0; i < family.size(); ++i) {
    family[i]->p_adjusted = ar[i];
    family[i]->p_improvement_adjusted = ai[i];
    DecideOne(*family[i], o);
  }
}

void Tally(GateReport& r) {
  r.regressions = r.improvements = r.insufficient = r.flaky = 0;
  auto add = [&r](const GateTest& t) {
    switch (t.verdict) {
      case GateVerdict::kRegression:
        ++r.regressions;
        break;
      case GateVerdict::kImproved:
        ++r.improvements;
        break;
      case GateVerdict::kInsufficient:
        ++r.insufficient;
        break;
      case GateVerdict::kFlaky:
        ++r.flaky;
        break;
      case GateVerdict::kPass:
        break;
    }
  };
  for (const GateCell& c : r.cells) add(c.test);
  for (const BoundaryShift& s : r.shifts) add(s.test);
  if (r.regressions > 0) {
    r.exit_code = 1;
    r.decision = "fail: regression";
  } else if (r.tests == 0) {
    r.exit_code = 2;
    r.decision = "fail: not enough evidence: no cell had enough answers to test";
  } else if (r.options.strict && r.insufficient > 0) {
    r.exit_code = 2;
    r.decision = "fail: not enough evidence: --strict and insufficient cells";
  } else {
    r.exit_code = 0;
    r.decision = "pass";
  }
}

}  // namespace nw::report::gate_internal
