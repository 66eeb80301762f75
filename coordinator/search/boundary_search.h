// LineSearch: adaptive boundary search along one line of a campaign (one configuration and needle
// position; the context lengths of the campaign's grid, shortest first). Pure: it is told the
// outcome of each trial it asked for and answers which trials to run next. docs/campaigns.md
// ("Boundary search") describes the algorithm and the campaign's `search:` key.
//
// Lengths are judged with the campaign's criterion by nw::Decide (common/verdict.h): a length's
// exact Clopper-Pearson interval (two-sided, at `confidence`) against `pass_rate` makes it FOUND
// (lower bound >= pass_rate), LOST (upper bound < pass_rate) or UNDECIDED. For steering, an
// undecided length with answers leans on its observed rate:
//   failing  when it is lost, or undecided with an observed pass rate below pass_rate and at
//            least `first_trials` answers (or its pool spent);
//   passing  when it is found, or undecided with an observed rate >= pass_rate and at least
//            `first_trials` answers (or its pool spent);
//   dead     when its whole pool ran and gave no answer (engine errors, timeouts, ...);
//   open     otherwise (not run yet, or short of answers).
// With first_trials 1 a single miss (0/1) leans failing and a single pass leans passing; neither
// is decided (0/1 at 95 % is [0, 0.975]): the stop rule below asks for more answers.
// The bracket is hi = the shortest failing length (or one past the grid) and lo = the longest
// passing length below hi (or one before the grid). While hi - lo > 1 the search runs
// `first_trials` trials at the middle index (bisection on the grid's index, i.e. geometrically
// for a geometric grid). Once lo and hi are adjacent it adds one trial to each side that is not
// yet DECIDED (while its pool lasts) and stops when both sides are decided: lo found and hi
// lost (converged). Trials that tip a side's observed rate across pass_rate move the bracket and
// bisection resumes. At the ends of the grid only one side exists: all-pass needs the longest
// length decided found, all-fail the shortest decided lost. A line whose pools run out before
// that ends undecided. Trials of a length run in order 0, 1, 2, ..., so they are the grid's
// trials (the same job keys).
//
// Bisection assumes that retrieval, once lost, stays lost at longer lengths. On data that is not
// monotone it still ends at an adjacent passing/failing pair, one of the transitions; lengths it
// skipped may disagree (the grid shows them; docs/campaigns.md says when to prefer it).
//
// The search waits for every trial it issued before deciding again, so its decisions depend only
// on the set of outcomes, not on the order they arrived in: replaying the outcomes stored in the
// database reproduces the same decisions (restart recovery).
//
// Thread-safety: a value type; no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/verdict.h"

namespace nw::search {

enum class TrialOutcome {
  kPass,
  kMiss,
  kNoAnswer,  // truncated, empty, engine_error, timeout, or the job failed: never a miss
};

/// One trial to run: the `trial`-th trial at lengths[length_index].
struct Probe {
  size_t length_index = 0;
  int trial = 0;
  friend bool operator==(const Probe&, const Probe&) = default;
};

enum class LineState {
  kRunning,    // trials pending, or more to issue
  kConverged,  // adjacent lengths: the shorter decided found, the longer decided lost
  kAllPass,    // the longest length is decided found
  kAllFail,    // the shortest length is decided lost
  kUndecided,  // a side of the boundary is still undecided and its pool is spent
  kBudget,     // the line's job budget is spent
  kNoAnswers,  // a length the search needs gave no answer in its whole pool
};
/// running, converged, all-pass, all-fail, undecided, budget, no-answers.
std::string_view LineStateName(LineState s);

struct LineVerdict {
  LineState state = LineState::kRunning;
  std::optional<size_t> pass_index;  // lo: the longest passing length below fail_index
  std::optional<size_t> fail_index;  // hi: the shortest failing length
  // The criterion's verdicts on them (kNoAnswers when absent).
  nw::Verdict pass_verdict = nw::Verdict::kNoAnswers, fail_verdict = nw::Verdict::kNoAnswers;
  int64_t jobs = 0;  // trials issued
};

struct LineSearchOptions {
  int first_trials = 1;           // trials at a length before it is called passing (>= 1)
  int max_trials = 1;             // the pool: trials a length may get at most (>= first_trials)
  double confidence = 0.95;       // the criterion's two-sided level (0 < confidence < 1)
  double pass_rate = 0.9;         // the criterion's threshold (0 < pass_rate < 1)
  std::optional<int64_t> budget;  // trials this line may issue at most (>= 1)
};

class LineSearch {
 public:
  /// InvalidArgument for no lengths or options out of range.
  static Result<LineSearch> Create(size_t lengths, const LineSearchOptions& options);

  /// Records the outcome of an issued trial. InvalidArgument for a trial that was not issued,
  /// FailedPrecondition for one already recorded.
  Status Observe(size_t length_index, int trial, TrialOutcome outcome);
  /// The trials to run now (they count as issued). Empty while issued trials are pending, and
  /// once the line is finished.
  std::vector<Probe> Next();

  LineVerdict Verdict() const;
  bool finished() const { return state_ != LineState::kRunning; }
  int pending() const { return pending_; }
  size_t lengths() const { return trials_.size(); }

 private:
  struct Stats {
    int issued = 0, answers = 0, passes = 0;
  };
  enum class Kind { kOpen, kPassing, kFailing, kDead };

  LineSearch(size_t lengths, const LineSearchOptions& options);
  Stats StatsAt(size_t i) const;
  Kind KindAt(size_t i) const;
  nw::Verdict VerdictAt(size_t i) const;
  // Issues up to `count` more trials at index i (bounded by the pool and the budget).
  void Issue(size_t i, int count, std::vector<Probe>* out);
  void Finish(LineState s) { state_ = s; }

  LineSearchOptions options_;
  std::vector<std::vector<std::optional<TrialOutcome>>> trials_;  // [length][trial]
  int pending_ = 0;
  int64_t issued_ = 0;
  LineState state_ = LineState::kRunning;
  std::optional<size_t> lo_, hi_;
};

}  // namespace nw::search
