#include "coordinator/search/boundary_search.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace nw::search {

std::string_view LineStateName(LineState s) {
  switch (s) {
    case LineState::kRunning:
      return "running";
    case LineState::kConverged:
      return "converged";
    case LineState::kAllPass:
      return "all-pass";
    case LineState::kAllFail:
      return "all-fail";
    case LineState::kUndecided:
      return "undecided";
    case LineState::kBudget:
      return "budget";
    case LineState::kNoAnswers:
      return "no-answers";
  }
  return "unknown";
}

Result<LineSearch> LineSearch::Create(size_t lengths, const LineSearchOptions& options) {
  if (lengths == 0) return Status::InvalidArgument("boundary search: a line without lengths");
  if (options.first_trials < 1) {
    return Status::InvalidArgument("boundary search: first_trials must be >= 1");
  }
  if (options.max_trials < options.first_trials) {
    return Status::InvalidArgument("boundary search: max_trials (" +
                                   std::to_string(options.max_trials) + ") < first_trials (" +
                                   std::to_string(options.first_trials) + ")");
  }
  if (!(options.confidence > 0 && options.confidence < 1)) {
    return Status::InvalidArgument("boundary search: confidence must be in (0, 1), got " +
                                   std::to_string(options.confidence));
  }
  if (!(options.pass_rate > 0 && options.pass_rate < 1)) {
    return Status::InvalidArgument("boundary search: pass_rate must be in (0, 1)");
  }
  if (options.budget && *options.budget < 1) {
    return Status::InvalidArgument("boundary search: budget must be >= 1");
  }
  return LineSearch(lengths, options);
}

LineSearch::LineSearch(size_t lengths, const LineSearchOptions& options)
    : options_(options), trials_(lengths) {}

Status LineSearch::Observe(size_t length_index, int trial, TrialOutcome outcome) {
  if (length_index >= trials_.size() || trial < 0 ||
      static_cast<size_t>(trial) >= trials_[length_index].size()) {
    return Status::InvalidArgument("boundary search: trial " + std::to_string(trial) +
                                   " at length index " + std::to_string(length_index) +
                                   " was not issued");
  }
  auto& slot = trials_[length_index][static_cast<size_t>(trial)];
  if (slot.has_value()) {
    return Status::FailedPrecondition("boundary search: trial " + std::to_string(trial) +
                                      " at length index " + std::to_string(length_index) +
                                      " already has an outcome");
  }
  slot = outcome;
  --pending_;
  return Status::Ok();
}

LineSearch::Stats LineSearch::StatsAt(size_t i) const {
  Stats s;
  s.issued = static_cast<int>(trials_[i].size());
  for (const auto& t : trials_[i]) {
    if (!t || *t == TrialOutcome::kNoAnswer) continue;
    ++s.answers;
    if (*t == TrialOutcome::kPass) ++s.passes;
  }
  return s;
}

nw::Verdict LineSearch::VerdictAt(size_t i) const {
  const Stats s = StatsAt(i);
  return nw::Decide(s.passes, s.answers, options_.pass_rate, options_.confidence);
}

LineSearch::Kind LineSearch::KindAt(size_t i) const {
  const Stats s = StatsAt(i);
  const nw::Verdict v = VerdictAt(i);
  if (v == nw::Verdict::kFound) return Kind::kPassing;
  if (v == nw::Verdict::kLost) return Kind::kFailing;
  const bool spent = s.issued >= options_.max_trials;
  if (s.answers >= options_.first_trials || (spent && s.answers > 0)) {
    const double rate = static_cast<double>(s.passes) / static_cast<double>(s.answers);
    return rate >= options_.pass_rate ? Kind::kPassing : Kind::kFailing;
  }
  if (spent) return Kind::kDead;
  return Kind::kOpen;
}

void LineSearch::Issue(size_t i, int count, std::vector<Probe>* out) {
  int room = options_.max_trials - static_cast<int>(trials_[i].size());
  if (options_.budget) {
    room = static_cast<int>(std::min<int64_t>(room, *options_.budget - issued_));
  }
  for (int k = 0; k < std::min(count, room); ++k) {
    out->push_back(Probe{i, static_cast<int>(trials_[i].size())});
    trials_[i].emplace_back();
    ++pending_;
    ++issued_;
  }
}

std::vector<Probe> LineSearch::Next() {
  std::vector<Probe> out;
  if (finished() || pending_ > 0) return out;
  const auto n = static_cast<int64_t>(trials_.size());
  int64_t hi = n;
  for (int64_t i = 0; i < n; ++i) {
    if (KindAt(static_cast<size_t>(i)) == Kind::kFailing) {
      hi = i;
      break;
    }
  }
  int64_t lo = -1;
  for (int64_t i = 0; i < hi; ++i) {
    if (KindAt(static_cast<size_t>(i)) == Kind::kPassing) lo = i;
  }
  lo_ = lo >= 0 ? std::optional<size_t>(static_cast<size_t>(lo)) : std::nullopt;
  hi_ = hi < n ? std::optional<size_t>(static_cast<size_t>(hi)) : std::nullopt;
  const bool budget_spent = options_.budget && issued_ >= *options_.budget;

  if (hi - lo > 1) {
    // Between lo and hi every length is open or dead: lo is the longest passing one below hi.
    const auto mid = static_cast<size_t>((lo + hi) / 2);
    if (KindAt(mid) == Kind::kDead) {
      Finish(LineState::kNoAnswers);
      return out;
    }
    Issue(mid, options_.first_trials - StatsAt(mid).answers, &out);
    if (out.empty()) Finish(budget_spent ? LineState::kBudget : LineState::kNoAnswers);
    return out;
  }
  // Adjacent (or at an end of the grid): add a trial to each side not decided yet.
  const bool has_lo = lo >= 0, has_hi = hi < n;
  const bool lo_done = !has_lo || VerdictAt(static_cast<size_t>(lo)) == nw::Verdict::kFound;
  const bool hi_done = !has_hi || VerdictAt(static_cast<size_t>(hi)) == nw::Verdict::kLost;
  if (lo_done && hi_done) {
    Finish(!has_lo ? LineState::kAllFail : !has_hi ? LineState::kAllPass : LineState::kConverged);
    return out;
  }
  if (!lo_done) Issue(static_cast<size_t>(lo), 1, &out);
  if (!hi_done) Issue(static_cast<size_t>(hi), 1, &out);
  if (out.empty()) Finish(budget_spent ? LineState::kBudget : LineState::kUndecided);
  return out;
}

LineVerdict LineSearch::Verdict() const {
  LineVerdict v;
  v.state = state_;
  v.pass_index = lo_;
  v.fail_index = hi_;
  if (lo_) v.pass_verdict = VerdictAt(*lo_);
  if (hi_) v.fail_verdict = VerdictAt(*hi_);
  v.jobs = issued_;
  return v;
}

}  // namespace nw::search
