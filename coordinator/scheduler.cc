#include "coordinator/scheduler.h"

#include <algorithm>
#include <limits>
#include <tuple>

namespace nw {
namespace {

// An engine error that may succeed on another attempt: the worker said so, or its code is one
// of the retryable StatusCodes (I/O, resource exhausted, unavailable, deadline exceeded).
bool IsRetryableEngineError(const JobResult& r) {
  if (r.outcome != Outcome::kEngineError) return false;
  if (r.retryable) return true;
  const auto code = StatusCodeFromName(r.error_code);
  return code.has_value() && IsRetryable(*code);
}

Status EngineErrorStatus(const JobResult& r, const std::string& worker_id) {
  const auto code = StatusCodeFromName(r.error_code);
  StatusCode c = code.value_or(StatusCode::kInternal);
  if (c == StatusCode::kOk) c = StatusCode::kInternal;
  return Status(c, "engine error on worker " + worker_id + ": " + r.error_message);
}

std::set<std::string> BackendsOf(const nlohmann::json& caps) {
  std::set<std::string> out;
  if (!caps.is_object()) return out;
  auto it = caps.find("backends");
  if (it == caps.end() || !it->is_array()) return out;
  for (const auto& b : *it) {
    if (b.is_string()) out.insert(b.get<std::string>());
  }
  return out;
}

}  // namespace

Status SchedulerOptions::Validate() const {
  if (heartbeat_interval_ms <= 0) {
    return Status::InvalidArgument("scheduler.heartbeat_interval_ms: must be > 0");
  }
  if (heartbeat_liveness < 1) {
    return Status::InvalidArgument("scheduler.heartbeat_liveness: must be >= 1");
  }
  if (lease_ms <= 0) return Status::InvalidArgument("scheduler.lease_ms: must be > 0");
  if (retry_backoff_initial_ms < 0 || retry_backoff_max_ms < retry_backoff_initial_ms) {
    return Status::InvalidArgument("scheduler.retry_backoff: need 0 <= initial_ms <= max_ms");
  }
  if (max_attempts < 1) return Status::InvalidArgument("scheduler.max_attempts: must be >= 1");
  return Status::Ok();
}

void SchedulerEvents::Append(SchedulerEvents&& other) {
  for (auto& f : other.failures) failures.push_back(std::move(f));
  for (auto& l : other.lost_workers) lost_workers.push_back(std::move(l));
  for (auto& g : other.grants) grants.push_back(std::move(g));
}

std::string_view ResultVerdictName(ResultVerdict v) {
  switch (v) {
    case ResultVerdict::kCommit:
      return "commit";
    case ResultVerdict::kAttemptFailed:
      return "attempt_failed";
    case ResultVerdict::kDuplicate:
      return "duplicate";
    case ResultVerdict::kStale:
      return "stale";
    case ResultVerdict::kUnknownJob:
      return "unknown_job";
    case ResultVerdict::kUnknownWorker:
      return "unknown_worker";
  }
  return "unknown_job";
}

Scheduler::Scheduler(const Clock& clock, SchedulerOptions options)
    : clock_(clock), options_(options) {}

void Scheduler::SetState(Job& job, State s) {
  --counts_[static_cast<int>(job.state)];
  job.state = s;
  ++counts_[static_cast<int>(s)];
}

Status Scheduler::AddJob(const std::string& key, const JobSpec& spec, int prior_attempts,
                         int priority) {
  if (key.empty()) return Status::InvalidArgument("scheduler: empty job key");
  if (prior_attempts < 0) {
    return Status::InvalidArgument("scheduler: job " + key + ": negative prior attempts");
  }
  if (jobs_.count(key) != 0) {
    return Status::AlreadyExists("scheduler: job " + key + " added twice");
  }
  Job job;
  job.key = key;
  job.spec = spec;
  job.priority = priority;
  job.seq = next_seq_++;
  job.attempt = prior_attempts;
  job.state = State::kQueued;
  ++counts_[static_cast<int>(State::kQueued)];
  auto [it, inserted] = jobs_.emplace(key, std::move(job));
  Enqueue(it->second);
  return Status::Ok();
}

void Scheduler::Enqueue(Job& job) {
  if (job.not_before_ms > clock_.NowMs()) {
    delayed_.emplace(job.not_before_ms, job.key);
    job.delayed = true;
  } else {
    ready_[{job.spec.backend, job.spec.model_digest}].insert({{-job.priority, job.seq}, job.key});
    job.delayed = false;
  }
}

void Scheduler::Dequeue(Job& job) {
  if (job.delayed) {
    delayed_.erase({job.not_before_ms, job.key});
    job.delayed = false;
    return;
  }
  auto b = ready_.find({job.spec.backend, job.spec.model_digest});
  if (b == ready_.end()) return;
  b->second.erase({{-job.priority, job.seq}, job.key});
  if (b->second.empty()) ready_.erase(b);
}

AttemptFailure Scheduler::FailLease(Job& job, Status reason) {
  AttemptFailure f;
  f.job_key = job.key;
  f.attempt = job.attempt;
  f.worker_id = job.lease_worker;
  if (auto w = workers_.find(job.lease_worker); w != workers_.end()) {
    w->second.leases.erase(job.key);
  }
  expiries_.erase({job.lease_expires_ms, job.key});
  job.lease_worker.clear();
  if (job.attempts_this_run >= options_.max_attempts) {
    reason = Status(reason.code(), reason.message() + " (attempt " + std::to_string(job.attempt) +
                                       "; " + std::to_string(job.attempts_this_run) + " of " +
                                       std::to_string(options_.max_attempts) +
                                       " attempts used, giving up)");
    SetState(job, State::kFailed);
    f.will_retry = false;
  } else {
    const int shift = std::min(job.attempts_this_run - 1, 30);
    const int64_t backoff =
        std::min(options_.retry_backoff_max_ms, options_.retry_backoff_initial_ms << shift);
    job.not_before_ms = clock_.NowMs() + backoff;
    SetState(job, State::kQueued);
    Enqueue(job);
    f.will_retry = true;
  }
  job.last_error = reason.ToString();
  f.reason = std::move(reason);
  return f;
}

void Scheduler::RemoveWorker(const std::string& worker_id, const Status& reason,
                             SchedulerEvents* ev) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  const std::set<std::string> leases = it->second.leases;
  for (const auto& key : leases) {
    ev->failures.push_back(FailLease(jobs_.at(key), reason));
  }
  workers_.erase(worker_id);
}

SchedulerEvents Scheduler::OnReady(const WorkerInfo& info, const std::vector<AttemptRef>& held) {
  SchedulerEvents ev;
  const std::set<AttemptRef> held_set(held.begin(), held.end());
  auto it = workers_.find(info.id);
  if (it != workers_.end()) {
    Worker& w = it->second;
    const std::set<std::string> leases = w.leases;
    for (const auto& key : leases) {
      Job& job = jobs_.at(key);
      if (held_set.count({key, job.attempt}) == 0) {
        ev.failures.push_back(FailLease(
            job, Status::Unavailable("worker " + info.id + " re-registered without attempt " +
                                     std::to_string(job.attempt))));
      }
    }
    std::set<AttemptRef> zombies;
    for (const auto& z : w.zombies) {
      if (held_set.count(z) != 0) zombies.insert(z);
    }
    w.zombies = std::move(zombies);
  } else {
    it = workers_.emplace(info.id, Worker{}).first;
  }
  Worker& w = it->second;
  w.info = info;
  w.info.slots = std::clamp(info.slots, 1, kMaxSlots);
  w.backends = BackendsOf(info.capabilities);
  w.last_seen_ms = clock_.NowMs();
  return ev;
}

Status Scheduler::OnHeartbeat(const std::string& worker_id) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return Status::NotFound("scheduler: unknown worker " + worker_id);
  it->second.last_seen_ms = clock_.NowMs();
  return Status::Ok();
}

ResultDecision Scheduler::OnResult(const std::string& worker_id, const JobResult& r) {
  ResultDecision d;
  auto wit = workers_.find(worker_id);
  if (wit == workers_.end()) {
    d.verdict = ResultVerdict::kUnknownWorker;
    d.reason = "result for " + r.job_key + " attempt " + std::to_string(r.attempt) +
               " from unknown worker " + worker_id;
    return d;
  }
  Worker& w = wit->second;
  w.last_seen_ms = clock_.NowMs();
  // The worker has finished this attempt, whatever we make of it: its slot is free again.
  w.zombies.erase({r.job_key, r.attempt});
  auto jit = jobs_.find(r.job_key);
  if (jit == jobs_.end()) {
    d.verdict = ResultVerdict::kUnknownJob;
    d.reason = "job " + r.job_key + " is not part of this run";
    return d;
  }
  Job& job = jit->second;
  const std::string what = "result for " + job.key + " attempt " + std::to_string(r.attempt) +
                           " from " + worker_id + ": ";
  if (job.state == State::kDone) {
    if (r.attempt == job.done_attempt) {
      d.verdict = ResultVerdict::kDuplicate;
      d.reason = what + "already committed";
    } else {
      d.verdict = ResultVerdict::kStale;
      d.reason = what + "job already done by attempt " + std::to_string(job.done_attempt);
    }
    return d;
  }
  if (job.state == State::kLeased && job.attempt == r.attempt && job.lease_worker == worker_id) {
    if (IsRetryableEngineError(r)) {
      d.verdict = ResultVerdict::kAttemptFailed;
      d.events.failures.push_back(FailLease(job, EngineErrorStatus(r, worker_id)));
      d.reason = d.events.failures.back().reason.ToString();
      return d;
    }
    w.leases.erase(job.key);
    expiries_.erase({job.lease_expires_ms, job.key});
    job.lease_worker.clear();
    job.done_attempt = r.attempt;
    SetState(job, State::kDone);
    d.verdict = ResultVerdict::kCommit;
    return d;
  }
  d.verdict = ResultVerdict::kStale;
  if (job.state == State::kFailed) {
    d.reason = what + "job already failed";
  } else if (r.attempt != job.attempt) {
    d.reason = what + "superseded by attempt " + std::to_string(job.attempt);
  } else if (job.state == State::kLeased) {
    d.reason = what + "attempt is leased to " + job.lease_worker;
  } else {
    d.reason = what + "lease expired or was released";
  }
  return d;
}

SchedulerEvents Scheduler::OnDisconnect(const std::string& worker_id, const std::string& reason) {
  SchedulerEvents ev;
  RemoveWorker(worker_id, Status::Unavailable("worker " + worker_id + " disconnected: " + reason),
               &ev);
  return ev;
}

SchedulerEvents Scheduler::Tick() {
  SchedulerEvents ev;
  const int64_t now = clock_.NowMs();
  const int64_t dead_after = options_.heartbeat_interval_ms * options_.heartbeat_liveness;

  std::vector<std::string> dead;
  for (const auto& [id, w] : workers_) {
    if (now - w.last_seen_ms > dead_after) dead.push_back(id);
  }
  for (const auto& id : dead) {
    const int64_t silent = now - workers_.at(id).last_seen_ms;
    Status reason =
        Status::Unavailable("worker " + id + " lost: silent for " + std::to_string(silent) +
                            " ms (liveness " + std::to_string(options_.heartbeat_liveness) + " x " +
                            std::to_string(options_.heartbeat_interval_ms) + " ms)");
    ev.lost_workers.push_back({id, reason});
    RemoveWorker(id, reason, &ev);
  }

  while (!expiries_.empty() && expiries_.begin()->first <= now) {
    Job& job = jobs_.at(expiries_.begin()->second);
    const std::string worker_id = job.lease_worker;
    const int attempt = job.attempt;
    ev.failures.push_back(
        FailLease(job, Status::DeadlineExceeded("lease of attempt " + std::to_string(attempt) +
                                                " on " + worker_id + " expired after " +
                                                std::to_string(options_.lease_ms) + " ms")));
    // The worker is presumably still running it: the slot stays occupied until it reports.
    if (auto w = workers_.find(worker_id); w != workers_.end()) {
      w->second.zombies.insert({job.key, attempt});
    }
  }

  while (!delayed_.empty() && delayed_.begin()->first <= now) {
    Job& job = jobs_.at(delayed_.begin()->second);
    delayed_.erase(delayed_.begin());
    job.delayed = false;
    job.not_before_ms = 0;
    Enqueue(job);
  }

  Grant(&ev);
  return ev;
}

bool Scheduler::CanRun(const Worker& w, const Job& job) const {
  return w.backends.count(job.spec.backend) != 0;
}

std::optional<std::string> Scheduler::PickJob(const Worker& w) const {
  // Best first: higher priority, then the model the worker has loaded, then oldest.
  std::optional<std::tuple<int, int, uint64_t>> best_rank;
  std::optional<std::string> best;
  for (const auto& backend : w.backends) {
    for (auto it = ready_.lower_bound({backend, std::string()});
         it != ready_.end() && it->first.first == backend; ++it) {
      const ReadyKey& head = *it->second.begin();
      const int affinity = it->first.second == w.last_model ? 0 : 1;
      const std::tuple<int, int, uint64_t> rank{head.first.first, affinity, head.first.second};
      if (!best_rank || rank < *best_rank) {
        best_rank = rank;
        best = head.second;
      }
    }
  }
  return best;
}

void Scheduler::Grant(SchedulerEvents* ev) {
  const int64_t now = clock_.NowMs();
  bool granted_any = true;
  while (granted_any && !ready_.empty()) {
    granted_any = false;
    std::vector<Worker*> order;
    for (auto& [id, w] : workers_) {
      if (w.Busy() < w.info.slots) order.push_back(&w);
    }
    std::sort(order.begin(), order.end(), [](const Worker* a, const Worker* b) {
      return std::tuple(a->Busy(), a->last_grant_seq, a->info.id) <
             std::tuple(b->Busy(), b->last_grant_seq, b->info.id);
    });
    for (Worker* w : order) {
      auto key = PickJob(*w);
      if (!key) continue;
      Job& job = jobs_.at(*key);
      Dequeue(job);
      ++job.attempt;
      ++job.attempts_this_run;
      SetState(job, State::kLeased);
      job.lease_worker = w->info.id;
      job.lease_expires_ms = now + options_.lease_ms;
      expiries_.emplace(job.lease_expires_ms, job.key);
      w->leases.insert(job.key);
      w->last_model = job.spec.model_digest;
      w->last_grant_seq = ++grant_seq_;
      ev->grants.push_back(
          {w->info.id, job.key, job.attempt, options_.lease_ms, job.lease_expires_ms, job.spec});
      granted_any = true;
    }
  }
}

std::vector<SkippedJob> Scheduler::DropUnschedulable() {
  std::vector<SkippedJob> out;
  std::set<std::string> backends;
  for (const auto& [id, w] : workers_) backends.insert(w.backends.begin(), w.backends.end());
  std::string have;
  for (const auto& b : backends) have += (have.empty() ? "" : ", ") + b;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    Job& job = it->second;
    if (job.state != State::kQueued || backends.count(job.spec.backend) != 0) {
      ++it;
      continue;
    }
    Dequeue(job);
    --counts_[static_cast<int>(State::kQueued)];
    out.push_back({job.key, Status::Unsupported(
                                "no worker runs backend '" + job.spec.backend +
                                "' (workers offer: " + (have.empty() ? "none" : have) + ")")});
    it = jobs_.erase(it);
  }
  return out;
}

SchedulerEvents Scheduler::ReleaseAll(const Status& reason) {
  SchedulerEvents ev;
  for (auto& [key, job] : jobs_) {
    if (job.state != State::kLeased) continue;
    AttemptFailure f;
    f.job_key = key;
    f.attempt = job.attempt;
    f.worker_id = job.lease_worker;
    f.reason = reason;
    f.will_retry = true;
    if (auto w = workers_.find(job.lease_worker); w != workers_.end()) {
      w->second.leases.erase(key);
    }
    expiries_.erase({job.lease_expires_ms, key});
    job.lease_worker.clear();
    job.last_error = reason.ToString();
    SetState(job, State::kQueued);
    Enqueue(job);
    ev.failures.push_back(std::move(f));
  }
  return ev;
}

bool Scheduler::Finished() const {
  return counts_[static_cast<int>(State::kQueued)] == 0 &&
         counts_[static_cast<int>(State::kLeased)] == 0;
}

SchedulerCounts Scheduler::Counts() const {
  SchedulerCounts c;
  c.queued = counts_[static_cast<int>(State::kQueued)];
  c.leased = counts_[static_cast<int>(State::kLeased)];
  c.done = counts_[static_cast<int>(State::kDone)];
  c.failed = counts_[static_cast<int>(State::kFailed)];
  c.total = c.queued + c.leased + c.done + c.failed;
  c.workers = static_cast<int64_t>(workers_.size());
  return c;
}

std::vector<std::string> Scheduler::WorkerIds() const {
  std::vector<std::string> out;
  for (const auto& [id, w] : workers_) out.push_back(id);
  return out;
}

bool Scheduler::HasWorker(const std::string& worker_id) const {
  return workers_.count(worker_id) != 0;
}

std::optional<int64_t> Scheduler::NextDeadlineMs() const {
  std::optional<int64_t> next;
  auto consider = [&next](int64_t t) {
    if (!next || t < *next) next = t;
  };
  if (!expiries_.empty()) consider(expiries_.begin()->first);
  if (!delayed_.empty()) consider(delayed_.begin()->first);
  const int64_t dead_after = options_.heartbeat_interval_ms * options_.heartbeat_liveness;
  for (const auto& [id, w] : workers_) consider(w.last_seen_ms + dead_after + 1);
  return next;
}

int Scheduler::AttemptOf(const std::string& key) const {
  auto it = jobs_.find(key);
  return it == jobs_.end() ? 0 : it->second.attempt;
}

std::string Scheduler::StateOf(const std::string& key) const {
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return "unknown";
  switch (it->second.state) {
    case State::kQueued:
      return "queued";
    case State::kLeased:
      return "leased";
    case State::kDone:
      return "done";
    case State::kFailed:
      return "failed";
  }
  return "unknown";
}

std::string Scheduler::LastErrorOf(const std::string& key) const {
  auto it = jobs_.find(key);
  return it == jobs_.end() ? std::string() : it->second.last_error;
}

}  // namespace nw
