// The release gate (`nw gate`): did the candidate lose retrieval the baseline had?
//
// 1. Configurations. A configuration is the tuple of axes model, engine, task, haystack, topk,
//    precision, backend, max_new_tokens. The axes UNDER TEST are those whose set of values
//    differs between the two sides (e.g. {topk}: 16 vs 8). A candidate configuration is paired
//    with the baseline configuration that agrees with it on every other axis (with exactly equal
//    axes preferred when several agree); several matches are ambiguous (InvalidArgument).
// 2. Samples. Within a configuration pair, a candidate job is paired with the baseline job of the
//    same context length, needle position and trial: the same design point, so under "no change"
//    each discordant pair is equally likely to go either way. Pairs whose prompt hashes are also
//    identical (e.g. an http job and its cpu twin) are counted as same-prompt pairs. Only answers
//    (pass, miss) count; engine errors, timeouts, truncated and empty outputs never count as
//    misses.
// 3. Cells. Samples are grouped into cells: (configuration pair, context length) by default, or
//    (…, length, position), or the whole configuration. Per cell, one-sided for a drop:
//      paired   (>= min_trials pairs with answers on both sides): exact McNemar on the discordant
//               pairs (lost = baseline pass & candidate miss, gained = the reverse);
//      unpaired (else, >= min_trials answers on each side): the Newcombe hybrid-score (Wilson)
//               interval for the difference, as a p-value;
//      insufficient otherwise (reported; fails only with --strict).
//    A cell REGRESSES when its Holm-adjusted p-value (over every test of the gate) is below alpha
//    AND its observed drop in pass rate exceeds the tolerance. Improvements never fail.
// 4. Boundary shift, per configuration pair, from VERDICTS under `criterion` (common/verdict.h;
//    the same verdicts as `nw report`, report/boundary.h): each side's "found at every position up
//    to" (found_up_to) and "lost from" (lost_from). A shift exists only when both positions are
//    decided: the candidate's decided-lost length is below the baseline's decided-found
//    found_up_to. Its answers at that length are then tested against the baseline's at the same
//    length (or at found_up_to when the baseline did not test it), with the same test and rule as
//    a cell. When the candidate is merely undecided below the baseline's found_up_to (no decided
//    loss there), the shift is INSUFFICIENT (it says how many answers would decide it), never a
//    regression; with no found_up_to on the baseline there is nothing to shift from (pass).
// 5. Decision: exit 1 when anything regressed; else 2 when nothing could be tested at all, or
//    with --strict when some cell (or the shift) was insufficient; else 0. (4, bad input, is the
//    CLI's.)
// 6. Flaky reruns (RunGateWithReruns): the candidate jobs behind regressed cells (the lost pairs,
//    or the misses when unpaired) are rerun K times through a Rerunner; each job's outcomes over
//    its original result and the K reruns give a verdict (flaky when passes and misses mix),
//    recorded in flaky_verdicts; the gate is then decided again with each rerun job counted by
//    the majority of its answers (ties count as a miss). Cells that stop regressing are FLAKY.
// Thread-safety: pure functions, except RunGateWithReruns (the caller's Store and Rerunner).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/verdict.h"
#include "db/store.h"
#include "report/stats.h"

namespace nw::report {

enum class GateGranularity { kLength, kCell, kConfig };
/// "length", "cell" (length x position) or "config".
Result<GateGranularity> ParseGateGranularity(const std::string& name);

struct GateOptions {
  double tolerance = 0.05;  // the smallest drop in pass rate that counts as a regression
  int64_t min_trials = 10;  // answers (pairs, when paired) a cell needs on each side
  double alpha = 0.05;      // one-sided, family-wise over all tests of the gate (Holm)
  GateGranularity by = GateGranularity::kLength;
  bool strict = false;  // insufficient cells fail the gate (exit 2)
  Criterion criterion;  // found / lost / undecided for the boundary shift (the campaign's)
  Status Validate() const;
};

enum class GateVerdict { kPass, kRegression, kImproved, kInsufficient, kFlaky };
std::string_view GateVerdictName(GateVerdict v);  // pass, regression, improved, insufficient, flaky
enum class GateMethod { kNone, kMcNemar, kNewcombe };
std::string_view GateMethodName(GateMethod m);  // none, mcnemar, newcombe

struct SideCounts {
  int64_t trials = 0;  // answers (pass + miss)
  int64_t passes = 0;
  int64_t errors = 0;   // results without an answer
  int64_t pending = 0;  // jobs without a result that may still run
  int64_t failed = 0;   // jobs without a result that gave up (retries used up)
};

/// The outcome of one test (a cell, or a boundary shift).
struct GateTest {
  SideCounts baseline, candidate;
  int64_t pairs = 0;              // pairs with answers on both sides
  int64_t same_prompt_pairs = 0;  // of those, with identical prompt hashes
  int64_t lost = 0;               // baseline pass, candidate miss
  int64_t gained = 0;             // baseline miss, candidate pass
  GateMethod method = GateMethod::kNone;
  double drop = 0;  // baseline pass rate - candidate pass rate (paired: (lost - gained) / pairs)
  double p_regression = 1, p_adjusted = 1;  // one-sided "candidate worse"; Holm-adjusted
  double p_improvement = 1, p_improvement_adjusted = 1;
  GateVerdict verdict = GateVerdict::kInsufficient;
  std::string reason;                   // why insufficient / what the verdict rests on
  std::vector<std::string> rerun_jobs;  // candidate job keys rerun for this test
  std::vector<std::string> flaky_jobs;  // of those, judged flaky
};

struct GateCell {
  size_t pair = 0;                 // index into GateReport::pairs
  std::optional<int64_t> length;   // kLength, kCell
  std::optional<double> position;  // kCell
  GateTest test;
};

struct BoundaryShift {
  size_t pair = 0;
  // Verdict boundaries (found_up_to / lost_from of report/boundary.h) of each side.
  std::optional<int64_t> baseline_l_pass, candidate_l_fail;
  std::optional<int64_t> candidate_l_pass, baseline_l_fail;
  bool shifted = false;                     // candidate lost_from < baseline found_up_to
  std::optional<int64_t> reference_length;  // the baseline length compared against
  GateTest test;                            // verdict kPass when not shifted
  std::string summary;
};

struct ConfigPair {
  std::string baseline_config, candidate_config;  // display labels
};

struct GateReport {
  std::string baseline_name, candidate_name;  // as given ("release-1", "quickstart-topk8")
  std::string baseline_source;                // "baseline release-1 (campaign quickstart)"
  GateOptions options;
  std::vector<std::string> axes_under_test;                                // e.g. {"topk"}
  std::map<std::string, std::pair<std::string, std::string>> axis_values;  // "16" -> "8"
  std::vector<ConfigPair> pairs;
  std::vector<std::string> unmatched_baseline, unmatched_candidate;  // configurations
  std::vector<GateCell> cells;
  std::vector<BoundaryShift> shifts;
  int64_t tests = 0;  // tested cells + tested shifts (the Holm family)
  int64_t regressions = 0, improvements = 0, insufficient = 0, flaky = 0;
  int rerun_times = 0;
  int exit_code = 0;     // 0 pass, 1 regression, 2 not enough evidence
  std::string decision;  // "pass", "fail: regression", "fail: not enough evidence"
};

/// Compares two sets of samples (CampaignSamples / BaselineSamples). InvalidArgument for bad
/// options, an empty side, or configurations that cannot be paired unambiguously.
Result<GateReport> RunGate(const std::vector<CampaignSample>& baseline,
                           const std::vector<CampaignSample>& candidate,
                           const GateOptions& options);

/// Runs jobs once more (the CLI's runs them on local workers through the embedded coordinator;
/// tests script outcomes).
class Rerunner {
 public:
  virtual ~Rerunner() = default;
  /// Runs every job once and returns the new results (results.id, result) by job key; a job
  /// without a new result is simply absent.
  virtual Result<std::map<std::string, std::pair<int64_t, JobResult>>> RunOnce(
      const std::vector<JobSpec>& jobs) = 0;
};

/// RunGate, then (times > 0) the flaky reruns of the regressed cells' candidate jobs, verdicts
/// recorded in `store` (read-write) under gate label "BASELINE -> CANDIDATE", and the decision
/// taken again. With times == 0 this is RunGate.
Result<GateReport> RunGateWithReruns(const std::vector<CampaignSample>& baseline,
                                     const std::vector<CampaignSample>& candidate,
                                     const GateOptions& options, int times, Rerunner& rerunner,
                                     Store& store, const std::string& gate_label, int64_t now_ms);

std::string RenderGateText(const GateReport& r);
std::string RenderGateMarkdown(const GateReport& r);
nlohmann::ordered_json RenderGateJson(const GateReport& r);
/// JUnit XML: one testsuite per configuration pair, one testcase per cell and one for the
/// boundary shift; regressions are <failure>, insufficient cells <skipped> (or <failure> with
/// --strict).
std::string RenderGateJUnit(const GateReport& r);

}  // namespace nw::report
