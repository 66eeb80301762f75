// Where retrieval breaks: the boundary of one configuration, computed from its heatmap cells.
// The same definitions as the v_boundary view (db/migrations/0002_views.sql); tests check both
// agree. Thread-safety: pure functions over values.
//
// Per configuration, over its tested context lengths in ascending order:
//   a length is CLEAN   when every needle position tested at it has answers (pass or miss) and
//                       all of them passed;
//   a length is FAILING when some position at it has a miss;
//   a length can be neither: no miss, but some position has no answers (only engine errors,
//                       timeouts, truncated or empty outputs, or jobs still pending).
//   L_pass        = the largest length L such that L and every shorter tested length are clean
//                   ("found at every position up to L_pass");
//   L_fail        = the smallest failing length ("lost from L_fail");
//   first_unclean = the smallest length that is not clean (L_pass is the length just below it);
//   max_clean     = the largest clean length anywhere; the data is NOT monotone when
//                   max_clean > L_fail (retrieval fails at L_fail, then works again longer).
// These strict facts (one miss makes a length failing) are what v_boundary keeps. The report's
// headline does not use them: it uses VERDICTS under the campaign's criterion (common/verdict.h),
// with a Bonferroni split of the confidence so that each family of claims holds at the stated
// level (docs/reports.md, "Verdicts"):
//   a cell (length, position) gets Decide(passes, answers) at the cell level
//       BonferroniConfidence(confidence, number of cells of the configuration);
//   a length gets Decide over its answers pooled across positions at the length level
//       BonferroniConfidence(confidence, number of lengths with answers); a length whose pooled
//       verdict is found or undecided but where some cell is lost is LOST (at those positions).
//   found_up_to = the largest length L such that L and every shorter tested length are found;
//   lost_from   = the smallest lost length; the verdicts are NOT monotone when a found length
//                 comes after a lost one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/verdict.h"
#include "db/store.h"

namespace nw::report {

/// One context length of one configuration, summed over its needle positions.
struct LengthSummary {
  int64_t length = 0;
  int64_t cells = 0;          // positions tested at this length
  int64_t clean_cells = 0;    // positions with answers, all passing
  int64_t failing_cells = 0;  // positions with at least one miss
  int64_t trials = 0, passes = 0, errors = 0, pending = 0;
  int64_t failed = 0;  // jobs that gave up (retries used up) without a result
  bool clean() const { return clean_cells == cells; }
  bool failing() const { return failing_cells > 0; }
  // Verdicts (ExtractBoundaries fills these).
  Verdict pooled = Verdict::kNoAnswers;   // the pooled answers' verdict at the length level
  Verdict verdict = Verdict::kNoAnswers;  // pooled, made lost by a lost cell
  std::vector<double> lost_positions;     // positions whose cell is lost at the cell level
};

/// One (length, position) cell's verdict at the cell level.
struct CellDecision {
  int64_t length = 0;
  double position = 0;
  int64_t passes = 0, trials = 0;
  Verdict verdict = Verdict::kNoAnswers;
};

struct ConfigBoundary {
  std::string config;
  std::vector<LengthSummary> lengths;  // ascending
  std::optional<int64_t> l_pass;
  std::optional<int64_t> l_fail;
  std::optional<int64_t> first_unclean;
  std::optional<int64_t> max_clean;
  bool monotone = true;
  int64_t fail_trials = 0, fail_passes = 0;                 // summed over the positions at l_fail
  int64_t pass_trials = 0, pass_passes = 0;                 // summed over the positions at l_pass
  int64_t trials = 0, passes = 0, errors = 0, pending = 0;  // whole configuration
  int64_t failed = 0;  // jobs that gave up (retries used up) without a result

  // Verdicts under the criterion (see the top of this file).
  Criterion criterion;
  double length_confidence = 0.95;  // per-length level (Bonferroni over lengths with answers)
  double cell_confidence = 0.95;    // per-cell level (Bonferroni over cells with answers)
  std::vector<CellDecision> cell_verdicts;  // by length, then position (as ordered by the map)
  std::optional<int64_t> found_up_to;       // every length <= it found
  std::optional<int64_t> lost_from;         // the smallest lost length
  std::vector<int64_t> undecided;           // undecided lengths, ascending
  std::vector<int64_t> found_after_lost;    // found lengths longer than lost_from
  bool verdicts_monotone = true;            // found_after_lost is empty
  /// The undecided length nearest the boundary (the shortest one) and the answers in all that
  /// would decide it at its observed rate (TrialsToDecide at the length level; nullopt: none
  /// would, e.g. the rate equals the threshold).
  std::optional<int64_t> nearest_undecided;
  std::optional<int64_t> decide_trials;

  int64_t min_length() const { return lengths.empty() ? 0 : lengths.front().length; }
  int64_t max_length() const { return lengths.empty() ? 0 : lengths.back().length; }
  /// Every tested length has a miss.
  bool lost_everywhere() const;
};

/// Groups cells by configuration (any order in; configurations out in natural order of their
/// label) and computes each boundary and its verdicts under `criterion`.
std::vector<ConfigBoundary> ExtractBoundaries(const std::vector<HeatmapCell>& cells,
                                              const Criterion& criterion = {});

/// The headline in plain words, built only from decided verdicts, each named length with its
/// pooled pass count and exact (Clopper-Pearson) interval at the length level, e.g.
///   "found at every position up to 2,048 tokens (pass 200/200, 99% CI 0.97-1.00); undecided at
///    4,096 (pass 190/200, 99% CI 0.90-0.98); lost from 8,192 (pass 12/200, 99% CI 0.03-0.11);
///    4,096 needs about 350 answers in all (150 more) to be decided at its observed rate 0.95"
///   "found at every position at every tested length (up to 8,000 tokens; ...)"
///   "lost at every tested length (1,000-8,000 tokens; ...)"
///   "undecided at every tested length (256-4,096 tokens; ...)"
/// naming undecided lengths, lost positions, non-monotone verdicts ("not monotone: found again
/// at 8,192 after lost from 4,096") and answers missing (failed jobs, errors, pending).
std::string DescribeBoundary(const ConfigBoundary& b);

/// The sentence about the nearest undecided length alone ("" when there is none).
std::string DescribeMoreTrials(const ConfigBoundary& b);

/// "99% CI" for a level of 0.99; "98.75% CI" for 0.9875.
std::string CiLabel(double confidence);

}  // namespace nw::report
