// The gate's flaky reruns (report/gate.h, point 6): the candidate jobs behind regressed tests are
// run again, each job's outcomes give a verdict recorded in the Store, and the gate is decided
// again with each rerun job counted by the majority of its answers.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "report/gate.h"
#include "report/gate_internal.h"

namespace nw::report {

Result<GateReport> RunGateWithReruns(const std::vector<CampaignSample>& baseline,
                                     const std::vector<CampaignSample>& candidate,
                                     const GateOptions& options, int times, Rerunner& rerunner,
                                     Store& store, const std::string& gate_label, int64_t now_ms) {
  std::vector<std::vector<std::string>> disagreeing;
  NW_ASSIGN_OR_RETURN(GateReport first,
                      gate_internal::Compute(baseline, candidate, options, {}, &disagreeing));
  gate_internal::Tally(first);
  if (times <= 0 || first.regressions == 0) return first;

  // The tests that regressed, in Compute's order (cells, then shifts), and their jobs.
  std::vector<bool> regressed;
  for (const GateCell& c : first.cells)
    regressed.push_back(c.test.verdict == GateVerdict::kRegression);
  for (const BoundaryShift& s : first.shifts) {
    regressed.push_back(s.test.verdict == GateVerdict::kRegression);
  }
  std::map<std::string, const CampaignSample*> by_key;
  for (const CampaignSample& s : candidate) by_key[s.job.key] = &s;
  std::vector<std::string> keys;
  std::set<std::string> seen;
  for (size_t i = 0; i < regressed.size(); ++i) {
    if (!regressed[i]) continue;
    for (const std::string& k : disagreeing[i]) {
      if (seen.insert(k).second) keys.push_back(k);
    }
  }
  std::vector<JobSpec> specs;
  for (const std::string& k : keys) specs.push_back(by_key.at(k)->job.spec);

  // Outcomes per job: the original result, then each rerun.
  std::map<std::string, std::vector<std::pair<int64_t, Outcome>>> runs;
  for (const std::string& k : keys) {
    const CampaignSample& s = *by_key.at(k);
    runs[k].emplace_back(s.result_id, s.result->outcome);
  }
  for (int t = 0; t < times; ++t) {
    NW_ASSIGN_OR_RETURN(auto fresh, rerunner.RunOnce(specs));
    for (const std::string& k : keys) {
      auto it = fresh.find(k);
      if (it != fresh.end()) runs[k].emplace_back(it->second.first, it->second.second.outcome);
    }
  }
  std::vector<FlakyVerdict> verdicts;
  std::map<std::string, Outcome> overrides;
  std::set<std::string> flaky;
  for (const std::string& k : keys) {
    FlakyVerdict v;
    v.job_key = k;
    v.gate = gate_label;
    v.decided_ms = now_ms;
    for (const auto& [id, outcome] : runs[k]) {
      ++v.runs;
      v.result_ids.push_back(id);
      if (outcome == Outcome::kPass) {
        ++v.passes;
      } else if (outcome == Outcome::kMiss) {
        ++v.misses;
      } else {
        ++v.errors;
      }
    }
    if (v.passes > 0 && v.misses > 0) {
      v.verdict = "flaky";
      flaky.insert(k);
    } else if (v.passes > 0) {
      v.verdict = "stable_pass";
    } else if (v.misses > 0) {
      v.verdict = "stable_miss";
    } else {
      v.verdict = "no_answer";
    }
    if (v.passes + v.misses > 0) {
      overrides[k] = v.passes > v.misses ? Outcome::kPass : Outcome::kMiss;
    }
    verdicts.push_back(std::move(v));
  }
  NW_RETURN_IF_ERROR(store.RecordFlakyVerdicts(verdicts));

  NW_ASSIGN_OR_RETURN(GateReport second,
                      gate_internal::Compute(baseline, candidate, options, overrides, nullptr));
  second.rerun_times = times;
  auto annotate = [&](GateTest& t, size_t i) {
    if (!regressed[i]) return;
    t.rerun_jobs = disagreeing[i];
    for (const std::string& k : disagreeing[i]) {
      if (flaky.count(k)) t.flaky_jobs.push_back(k);
    }
    if (t.verdict != GateVerdict::kRegression) {
      t.verdict = GateVerdict::kFlaky;
      t.reason = "regressed before " + std::to_string(times) + " reruns of " +
                 std::to_string(t.rerun_jobs.size()) + " jobs (" +
                 std::to_string(t.flaky_jobs.size()) + " flaky); now: " + t.reason;
    } else {
      t.reason += "; still regressed after " + std::to_string(times) + " reruns of " +
                  std::to_string(t.rerun_jobs.size()) + " jobs (" +
                  std::to_string(t.flaky_jobs.size()) + " flaky)";
    }
  };
  size_t i = 0;
  for (GateCell& c : second.cells) annotate(c.test, i++);
  for (BoundaryShift& s : second.shifts) annotate(s.test, i++);
  gate_internal::Tally(second);
  return second;
}

}  // namespace nw::report
