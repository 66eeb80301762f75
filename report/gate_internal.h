// The pieces of the release gate shared by its files (internal to nw_report; report/gate.h is
// the interface): gate.cc pairs configurations and accumulates the tests (Compute), gate_stats.cc
// chooses and decides each test and the gate's decision, gate_reruns.cc runs the flaky reruns,
// gate_render_text.cc and gate_render_data.cc render. Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "report/gate.h"

namespace nw::report::gate_internal {

/// The gate on two sets of samples, the candidate's outcomes replaced by `overrides` (by job key;
/// after reruns), verdicts decided but not tallied. `disagreeing`, when not null, gets per test
/// (cells in report order, then shifts) the candidate jobs that disagree: the lost pairs under
/// McNemar, else every candidate miss.
Result<GateReport> Compute(const std::vector<CampaignSample>& baseline,
                           const std::vector<CampaignSample>& candidate, const GateOptions& o,
                           const std::map<std::string, Outcome>& overrides,
                           std::vector<std::vector<std::string>>* disagreeing);

// ---- Statistics (gate_stats.cc) ----

/// Chooses the test of a cell or shift (paired McNemar, unpaired Newcombe, or none: insufficient)
/// and computes its unadjusted one-sided p-values; verdicts come after Holm.
void ChooseTest(GateTest& t, bool baseline_seen, bool candidate_seen, const GateOptions& o);
/// Holm over every test in `family` (the tested ones), then each test's verdict.
void DecideTests(const std::vector<GateTest*>& family, const GateOptions& o);
/// Counts the verdicts and sets the decision and exit code.
void Tally(GateReport& r);
/// "0.0123", "<0.0001".
std::string FormatP(double p);
/// "7/10".
std::string FormatRate(int64_t passes, int64_t trials);
/// "+0.25", "-0.10".
std::string Signed(double v);

// ---- Rendering (gate_render_text.cc) ----

/// "length 2,000", "length 2,000 position 50%", "all lengths".
std::string CellName(const GateCell& c);
/// "7/10 e1 f2 p3": passes/answers, then runs without an answer, failed and pending jobs.
std::string SideText(const SideCounts& c);

}  // namespace nw::report::gate_internal
