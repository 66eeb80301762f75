#include "coordinator/search/search_driver.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

namespace nw::search {
namespace {

TrialOutcome OutcomeOf(Outcome o) {
  if (o == Outcome::kPass) return TrialOutcome::kPass;
  if (o == Outcome::kMiss) return TrialOutcome::kMiss;
  return TrialOutcome::kNoAnswer;
}

// What identifies a line: the spec without its length and trial.
std::string LineKey(const JobSpec& j) {
  JobSpec k = j;
  k.context_length = 0;
  k.seed = 0;
  k.trial = 0;
  return k.ToJson().dump();
}

struct Stored {
  std::optional<TrialOutcome> outcome;  // none while the job is unknown, queued or leased
  int attempts = 0;                     // attempts started so far
};

Result<Stored> StoredOutcome(Store& store, const std::string& key) {
  NW_ASSIGN_OR_RETURN(std::optional<JobRecord> job, store.FindJob(key));
  Stored out;
  if (!job) return out;
  out.attempts = job->attempts;
  if (job->state == JobState::kFailed) out.outcome = TrialOutcome::kNoAnswer;
  if (job->state != JobState::kDone) return out;
  NW_ASSIGN_OR_RETURN(auto history, store.ResultHistory(key));
  out.outcome =
      history.empty() ? TrialOutcome::kNoAnswer : OutcomeOf(history.back().second.outcome);
  return out;
}

}  // namespace

Result<SearchDriver> SearchDriver::Create(const BoundarySearchSettings& settings, int trials,
                                          const std::vector<JobSpec>& grid) {
  LineSearchOptions o;
  o.first_trials = settings.first_trials;
  o.max_trials = trials;
  o.confidence = settings.confidence;
  o.pass_rate = settings.pass_rate;
  o.budget = settings.budget;

  // Group the grid by line, keeping the grid's order of lines.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const JobSpec*>> by_line;
  for (const JobSpec& j : grid) {
    const std::string k = LineKey(j);
    auto [it, inserted] = by_line.try_emplace(k);
    if (inserted) order.push_back(k);
    it->second.push_back(&j);
  }
  SearchDriver d;
  d.grid_jobs_ = static_cast<int64_t>(grid.size());
  for (const std::string& k : order) {
    const auto& specs = by_line[k];
    std::vector<int64_t> lengths;
    for (const JobSpec* j : specs) lengths.push_back(j->context_length);
    std::sort(lengths.begin(), lengths.end());
    lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
    NW_ASSIGN_OR_RETURN(LineSearch search, LineSearch::Create(lengths.size(), o));
    Line line{ConfigLabel(*specs.front()), specs.front()->needle_position, lengths,
              std::vector<std::vector<JobSpec>>(lengths.size()), std::move(search)};
    for (const JobSpec* j : specs) {
      const auto li = static_cast<size_t>(
          std::lower_bound(lengths.begin(), lengths.end(), j->context_length) - lengths.begin());
      auto& slot = line.jobs[li];
      if (j->trial < 0 || j->trial >= trials) {
        return Status::InvalidArgument("boundary search: job trial " + std::to_string(j->trial) +
                                       " outside the campaign's " + std::to_string(trials) +
                                       " trials");
      }
      if (slot.size() <= static_cast<size_t>(j->trial)) slot.resize(j->trial + 1);
      slot[static_cast<size_t>(j->trial)] = *j;
    }
    const size_t index = d.lines_.size();
    for (size_t li = 0; li < lengths.size(); ++li) {
      if (line.jobs[li].size() != static_cast<size_t>(trials)) {
        return Status::InvalidArgument("boundary search: " + line.config + " at length " +
                                       std::to_string(lengths[li]) + " has " +
                                       std::to_string(line.jobs[li].size()) + " trials, expected " +
                                       std::to_string(trials));
      }
      for (int t = 0; t < trials; ++t) {
        d.slot_of_[line.jobs[li][static_cast<size_t>(t)].Key()] = Slot{index, li, t};
      }
    }
    d.lines_.push_back(std::move(line));
  }
  return d;
}

Status SearchDriver::Record(const std::string& key, TrialOutcome outcome) {
  auto w = waiting_.find(key);
  if (w == waiting_.end()) return Status::Ok();  // not asked for, or already recorded
  waiting_.erase(w);
  const Slot& s = slot_of_.at(key);
  return lines_[s.line].search.Observe(s.length, s.trial, outcome);
}

Status SearchDriver::Advance(Store& store, std::vector<size_t> lines, std::vector<JobSpec>* asked,
                             std::vector<JobRecord>* to_run) {
  while (!lines.empty()) {
    const size_t li = lines.back();
    lines.pop_back();
    Line& line = lines_[li];
    const std::vector<Probe> probes = line.search.Next();
    bool all_known = !probes.empty();
    for (const Probe& p : probes) {
      const JobSpec& spec = line.jobs[p.length_index][static_cast<size_t>(p.trial)];
      const std::string key = spec.Key();
      asked->push_back(spec);
      waiting_.insert(key);
      NW_ASSIGN_OR_RETURN(Stored stored, StoredOutcome(store, key));
      if (stored.outcome) {
        NW_RETURN_IF_ERROR(Record(key, *stored.outcome));
      } else {
        all_known = false;
        JobRecord r;
        r.key = key;
        r.spec = spec;
        r.attempts = stored.attempts;
        to_run->push_back(std::move(r));
      }
    }
    if (all_known) lines.push_back(li);  // every answer was stored already: decide again
  }
  return Status::Ok();
}

Result<std::vector<JobSpec>> SearchDriver::Start(Store& store) {
  std::vector<size_t> all(lines_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = all.size() - 1 - i;  // first line first
  std::vector<JobSpec> asked;
  std::vector<JobRecord> to_run;
  NW_RETURN_IF_ERROR(Advance(store, std::move(all), &asked, &to_run));
  return asked;
}

Result<std::vector<JobRecord>> SearchDriver::OnFinished(Store& store, int64_t campaign_id,
                                                        const std::vector<JobResult>& committed,
                                                        const std::vector<std::string>& given_up,
                                                        int64_t now_ms) {
  std::set<size_t> touched;
  auto note = [&](const std::string& key, TrialOutcome o) -> Status {
    if (!waiting_.count(key)) return Status::Ok();
    touched.insert(slot_of_.at(key).line);
    return Record(key, o);
  };
  for (const JobResult& r : committed) NW_RETURN_IF_ERROR(note(r.job_key, OutcomeOf(r.outcome)));
  for (const std::string& k : given_up) NW_RETURN_IF_ERROR(note(k, TrialOutcome::kNoAnswer));
  std::vector<JobSpec> asked;
  std::vector<JobRecord> to_run;
  NW_RETURN_IF_ERROR(
      Advance(store, std::vector<size_t>(touched.rbegin(), touched.rend()), &asked, &to_run));
  if (!asked.empty()) NW_RETURN_IF_ERROR(store.AddJobs(campaign_id, asked, now_ms));
  return to_run;
}

std::vector<LineReport> SearchDriver::Lines() const {
  std::vector<LineReport> out;
  for (const Line& l : lines_) {
    LineReport r;
    r.config = l.config;
    r.needle_position = l.position;
    r.lengths = l.lengths;
    r.verdict = l.search.Verdict();
    if (r.verdict.pass_index) r.pass_length = l.lengths[*r.verdict.pass_index];
    if (r.verdict.fail_index) r.fail_length = l.lengths[*r.verdict.fail_index];
    r.grid_jobs = static_cast<int64_t>(l.lengths.size() * (l.jobs.empty() ? 0 : l.jobs[0].size()));
    out.push_back(std::move(r));
  }
  return out;
}

int64_t SearchDriver::asked_jobs() const {
  int64_t n = 0;
  for (const Line& l : lines_) n += l.search.Verdict().jobs;
  return n;
}

bool SearchDriver::finished() const {
  return std::all_of(lines_.begin(), lines_.end(),
                     [](const Line& l) { return l.search.finished(); });
}

}  // namespace nw::search
