#include "coordinator/scheduler.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
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

std::set<std::string> StringSet(const nlohmann::json& list) {
  std::set<std::string> out;
  if (!list.is_array()) return out;
  for (const auto& b : list) {
    if (b.is_string()) out.insert(b.get<std::string>());
  }
  return out;
}

std::optional<std::set<std::string>> OptionalList(const nlohmann::json& caps, const char* key) {
  if (!caps.is_object()) return std::nullopt;
  auto it = caps.find(key);
  if (it == caps.end() || !it->is_array()) return std::nullopt;
  return StringSet(*it);
}

}  // namespace

Status SchedulerOptions::Validate() const {
  if (heartbeat_interval_ms <= 0) {
    return Status::InvalidArgument("scheduler.heartbeat_interval_ms: must be > 0");
  }
  if (heartbeat_liveness < 1) {
    return Status::InvalidArgument("scheduler.heartbeat_liveness: must be >= 1");
  }
  if (lease_ms <= 0 || lease_ms > int64_t{30} * 24 * 3600 * 1000) {
    return Status::InvalidArgument("scheduler.lease_ms: must be > 0 and at most 30 days");
  }
  if (retry_backoff_initial_ms < 0 || retry_backoff_max_ms < retry_backoff_initial_ms) {
    return Status::InvalidArgument("scheduler.retry_backoff: need 0 <= initial_ms <= max_ms");
  }
  if (max_attempts < 1) return Status::InvalidArgument("scheduler.max_attempts: must be >= 1");
  if (orphan_grace_ms < 0) return Status::InvalidArgument("scheduler.orphan_grace_ms: < 0");
  if (hedge_after_ms < 0) return Status::InvalidArgument("scheduler.hedge_after_ms: < 0");
  if (initial_worker_credit < 1) {
    return Status::InvalidArgument("scheduler.initial_worker_credit: must be >= 1");
  }
  return Status::Ok();
}

void SchedulerEvents::Append(SchedulerEvents&& other) {
  for (auto& f : other.failures) failures.push_back(std::move(f));
  for (auto& l : other.lost_workers) lost_workers.push_back(std::move(l));
  for (auto& g : other.grants) grants.push_back(std::move(g));
  for (auto& a : other.adopted) adopted.push_back(std::move(a));
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

// ---- Specs -------------------------------------------------------------------------------------

const Scheduler::SpecCommon* Scheduler::Intern(const JobSpec& spec) {
  // The interning key: every shared field, separated by a byte that cannot occur in them.
  std::string id;
  for (const std::string* f : {&spec.model_dir, &spec.model_digest, &spec.engine_version,
                               &spec.task, &spec.haystack, &spec.backend, &spec.fault}) {
    id += *f;
    id.push_back('\0');
  }
  id += spec.precision.ToJson().dump();
  id.push_back('\0');
  if (spec.http) id += spec.http->ToJson().dump();
  auto it = spec_pool_.find(id);
  if (it == spec_pool_.end()) {
    auto common = std::make_unique<SpecCommon>();
    common->model_dir = spec.model_dir;
    common->model_digest = spec.model_digest;
    common->engine_version = spec.engine_version;
    common->task = spec.task;
    common->haystack = spec.haystack;
    common->backend = spec.backend;
    common->fault = spec.fault;
    common->precision = spec.precision;
    common->http = spec.http;
    it = spec_pool_.emplace(std::move(id), std::move(common)).first;
  }
  return it->second.get();
}

JobSpec Scheduler::SpecOf(const Job& job) const {
  JobSpec s;
  s.model_dir = job.common->model_dir;
  s.model_digest = job.common->model_digest;
  s.engine_version = job.common->engine_version;
  s.task = job.common->task;
  s.haystack = job.common->haystack;
  s.backend = job.common->backend;
  s.fault = job.common->fault;
  s.precision = job.common->precision;
  s.http = job.common->http;
  s.context_length = job.context_length;
  s.needle_position = job.needle_position;
  s.seed = job.seed;
  s.topk = job.topk;
  s.trial = job.trial;
  s.max_new_tokens = job.max_new_tokens;
  s.probe = job.probe;
  return s;
}

// ---- Campaigns ---------------------------------------------------------------------------------

Status Scheduler::AddCampaign(int64_t id, const std::string& name, int priority, bool paused) {
  if (campaigns_.count(id) != 0) {
    return Status::AlreadyExists("scheduler: campaign " + std::to_string(id) + " added twice");
  }
  Campaign& c = campaigns_[id];
  c.id = id;
  c.name = name;
  c.priority = priority;
  c.paused = paused;
  return Status::Ok();
}

bool Scheduler::HasCampaign(int64_t id) const { return campaigns_.count(id) != 0; }

Scheduler::Campaign* Scheduler::FindCampaign(int64_t id) {
  auto it = campaigns_.find(id);
  return it == campaigns_.end() ? nullptr : &it->second;
}

Status Scheduler::SetCampaignPriority(int64_t id, int priority) {
  Campaign* c = FindCampaign(id);
  if (c == nullptr) return Status::NotFound("scheduler: unknown campaign " + std::to_string(id));
  c->priority = priority;
  return Status::Ok();
}

Status Scheduler::SetCampaignPaused(int64_t id, bool paused) {
  Campaign* c = FindCampaign(id);
  if (c == nullptr) return Status::NotFound("scheduler: unknown campaign " + std::to_string(id));
  c->paused = paused;
  return Status::Ok();
}

Result<int64_t> Scheduler::RemoveCampaign(int64_t id) {
  Campaign* c = FindCampaign(id);
  if (c == nullptr) return Status::NotFound("scheduler: unknown campaign " + std::to_string(id));
  int64_t removed = 0;
  for (auto& [key, job] : jobs_) {
    auto it = std::find(job.campaigns.begin(), job.campaigns.end(), id);
    if (it == job.campaigns.end()) continue;
    if (job.state == State::kQueued) Dequeue(job);
    job.campaigns.erase(it);
    if (job.campaigns.empty()) {
      if (job.state == State::kQueued) ++removed;
      detached_.push_back(key);
    } else if (job.state == State::kQueued) {
      Enqueue(job);
    }
  }
  campaigns_.erase(id);
  SweepDetached();
  return removed;
}

Result<CampaignCounts> Scheduler::CountsOf(int64_t id) const {
  auto it = campaigns_.find(id);
  if (it == campaigns_.end()) {
    return Status::NotFound("scheduler: unknown campaign " + std::to_string(id));
  }
  const Campaign& c = it->second;
  CampaignCounts out;
  out.queued = c.counts[static_cast<int>(State::kQueued)];
  out.leased = c.counts[static_cast<int>(State::kLeased)];
  out.done = c.counts[static_cast<int>(State::kDone)];
  out.failed = c.counts[static_cast<int>(State::kFailed)];
  return out;
}

std::vector<int64_t> Scheduler::TakeFinishedCampaigns() {
  std::vector<int64_t> finished;
  for (const auto& [id, c] : campaigns_) {
    if (id == kDefaultCampaign) continue;
    if (c.counts[static_cast<int>(State::kQueued)] == 0 &&
        c.counts[static_cast<int>(State::kLeased)] == 0) {
      finished.push_back(id);
    }
  }
  for (int64_t id : finished) {
    // No queued job left: removing it only drops finished jobs (shared ones stay for others).
    (void)RemoveCampaign(id);
  }
  return finished;
}

// ---- Jobs --------------------------------------------------------------------------------------

void Scheduler::SetState(Job& job, State s) {
  --counts_[static_cast<int>(job.state)];
  ++counts_[static_cast<int>(s)];
  for (int64_t id : job.campaigns) {
    if (Campaign* c = FindCampaign(id)) {
      --c->counts[static_cast<int>(job.state)];
      ++c->counts[static_cast<int>(s)];
    }
  }
  job.state = s;
}

Scheduler::Job& Scheduler::NewJob(const std::string& key, const JobSpec& spec, int prior_attempts,
                                  int priority) {
  auto [it, inserted] = jobs_.emplace(key, Job{});
  Job& job = it->second;
  job.key = &it->first;
  job.common = Intern(spec);
  job.context_length = spec.context_length;
  job.needle_position = spec.needle_position;
  job.seed = spec.seed;
  job.topk = spec.topk;
  job.trial = spec.trial;
  job.max_new_tokens = spec.max_new_tokens;
  job.probe = spec.probe;
  job.priority = priority;
  job.seq = next_seq_++;
  job.attempt = prior_attempts;
  job.state = State::kQueued;
  ++counts_[static_cast<int>(State::kQueued)];
  return job;
}

Status Scheduler::AddJob(const std::string& key, const JobSpec& spec, int prior_attempts,
                         int priority) {
  if (!HasCampaign(kDefaultCampaign)) {
    NW_RETURN_IF_ERROR(AddCampaign(kDefaultCampaign, "default", 0));
  }
  if (jobs_.count(key) != 0) {
    return Status::AlreadyExists("scheduler: job " + key + " added twice");
  }
  return AddCampaignJob(kDefaultCampaign, key, spec, prior_attempts, priority);
}

Status Scheduler::AddCampaignJob(int64_t campaign, const std::string& key, const JobSpec& spec,
                                 int prior_attempts, int priority) {
  if (key.empty()) return Status::InvalidArgument("scheduler: empty job key");
  if (prior_attempts < 0) {
    return Status::InvalidArgument("scheduler: job " + key + ": negative prior attempts");
  }
  Campaign* c = FindCampaign(campaign);
  if (c == nullptr) {
    return Status::NotFound("scheduler: job " + key + ": unknown campaign " +
                            std::to_string(campaign));
  }
  auto it = jobs_.find(key);
  if (it == jobs_.end()) {
    Job& job = NewJob(key, spec, prior_attempts, priority);
    job.campaigns.push_back(campaign);
    ++c->counts[static_cast<int>(State::kQueued)];
    Enqueue(job);
    return Status::Ok();
  }
  Job& job = it->second;
  if (std::find(job.campaigns.begin(), job.campaigns.end(), campaign) != job.campaigns.end()) {
    return Status::AlreadyExists("scheduler: job " + key + " added twice to campaign " +
                                 std::to_string(campaign));
  }
  if (job.state == State::kQueued) Dequeue(job);
  job.campaigns.push_back(campaign);
  ++c->counts[static_cast<int>(job.state)];
  job.priority = std::max(job.priority, priority);
  if (job.state == State::kQueued) Enqueue(job);
  return Status::Ok();
}

Status Scheduler::AddOrphanLease(int64_t campaign, const std::string& key, const JobSpec& spec,
                                 int attempt, const std::string& worker_id,
                                 int64_t lease_expires_ms) {
  if (attempt < 1) {
    return Status::InvalidArgument("scheduler: orphan lease of " + key + ": attempt < 1");
  }
  if (jobs_.count(key) != 0) return AddCampaignJob(campaign, key, spec, attempt);
  NW_RETURN_IF_ERROR(AddCampaignJob(campaign, key, spec, attempt));
  Job& job = jobs_.at(key);
  Dequeue(job);
  SetState(job, State::kLeased);
  Lease l;
  l.worker = worker_id;
  l.attempt = attempt;
  l.started_ms = clock_.NowMs();
  l.orphan = true;
  l.orphan_expires_ms = lease_expires_ms;
  l.expires_ms = std::min(lease_expires_ms, clock_.NowMs() + options_.orphan_grace_ms);
  expiries_.insert({l.expires_ms, &job, attempt});
  job.leases.push_back(std::move(l));
  return Status::Ok();
}

Status Scheduler::Requeue(const std::string& key) {
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return Status::NotFound("scheduler: unknown job " + key);
  Job& job = it->second;
  if (job.state != State::kDone && job.state != State::kFailed) return Status::Ok();
  job.attempts_this_run = 0;
  job.done_attempt = 0;
  job.not_before_ms = 0;
  SetState(job, State::kQueued);
  Enqueue(job);
  return Status::Ok();
}

void Scheduler::EnqueueIn(Campaign& c, Job& job) {
  c.ready[Bucket{job.common}].insert(ReadyEntry{-job.priority, job.seq, &job});
}

void Scheduler::DequeueFrom(Campaign& c, Job& job) {
  auto b = c.ready.find(Bucket{job.common});
  if (b == c.ready.end()) return;
  b->second.erase(ReadyEntry{-job.priority, job.seq, &job});
  if (b->second.empty()) c.ready.erase(b);
}

void Scheduler::Enqueue(Job& job) {
  if (job.not_before_ms > clock_.NowMs()) {
    delayed_.emplace(job.not_before_ms, &job);
    job.delayed = true;
    return;
  }
  job.delayed = false;
  for (int64_t id : job.campaigns) {
    if (Campaign* c = FindCampaign(id)) EnqueueIn(*c, job);
  }
}

void Scheduler::Dequeue(Job& job) {
  if (job.delayed) {
    delayed_.erase({job.not_before_ms, &job});
    job.delayed = false;
    return;
  }
  for (int64_t id : job.campaigns) {
    if (Campaign* c = FindCampaign(id)) DequeueFrom(*c, job);
  }
}

Scheduler::Lease* Scheduler::FindLease(Job& job, int attempt) {
  for (auto& l : job.leases) {
    if (l.attempt == attempt) return &l;
  }
  return nullptr;
}

void Scheduler::AddLease(Job& job, Worker& w, int attempt, int64_t expires_ms) {
  Lease l;
  l.worker = w.info.id;
  l.attempt = attempt;
  l.started_ms = clock_.NowMs();
  l.expires_ms = expires_ms;
  expiries_.insert({expires_ms, &job, attempt});
  w.leases.insert(*job.key);
  job.leases.push_back(std::move(l));
}

void Scheduler::Adopt(Job& job, Lease& lease, Worker& w) {
  expiries_.erase({lease.expires_ms, &job, lease.attempt});
  lease.orphan = false;
  lease.expires_ms = lease.orphan_expires_ms;
  expiries_.insert({lease.expires_ms, &job, lease.attempt});
  w.leases.insert(*job.key);
}

void Scheduler::DropLease(Job& job, int attempt) {
  for (auto it = job.leases.begin(); it != job.leases.end(); ++it) {
    if (it->attempt != attempt) continue;
    if (auto w = workers_.find(it->worker); w != workers_.end()) {
      w->second.leases.erase(*job.key);
    }
    expiries_.erase({it->expires_ms, &job, it->attempt});
    job.leases.erase(it);
    return;
  }
}

AttemptFailure Scheduler::FailLease(Job& job, int attempt, Status reason) {
  AttemptFailure f;
  f.job_key = *job.key;
  f.attempt = attempt;
  if (const Lease* l = FindLease(job, attempt)) f.worker_id = l->worker;
  DropLease(job, attempt);
  if (!job.leases.empty()) {
    // A hedge (or the primary of a hedged job) failed: the other lease carries the job on.
    f.will_retry = true;
    f.reason = std::move(reason);
    return f;
  }
  if (job.attempts_this_run >= options_.max_attempts) {
    reason = Status(reason.code(), reason.message() + " (attempt " + std::to_string(attempt) +
                                       "; " + std::to_string(job.attempts_this_run) + " of " +
                                       std::to_string(options_.max_attempts) +
                                       " attempts used, giving up)");
    SetState(job, State::kFailed);
    f.will_retry = false;
  } else {
    // An orphan lease (from before a restart) counts as no attempt of this run.
    const int shift = std::clamp(job.attempts_this_run - 1, 0, 30);
    const int64_t backoff =
        std::min(options_.retry_backoff_max_ms, options_.retry_backoff_initial_ms << shift);
    job.not_before_ms = clock_.NowMs() + backoff;
    SetState(job, State::kQueued);
    Enqueue(job);
    f.will_retry = true;
  }
  job.last_error = reason.ToString();
  f.reason = std::move(reason);
  if (job.campaigns.empty()) detached_.push_back(*job.key);
  return f;
}

void Scheduler::SweepDetached() {
  for (const std::string& key : detached_) {
    auto it = jobs_.find(key);
    if (it == jobs_.end()) continue;
    Job& job = it->second;
    if (!job.campaigns.empty() || job.state == State::kLeased) continue;
    if (job.state == State::kQueued) Dequeue(job);
    --counts_[static_cast<int>(job.state)];
    jobs_.erase(it);
  }
  detached_.clear();
}

// ---- Workers -----------------------------------------------------------------------------------

void Scheduler::RemoveWorker(const std::string& worker_id, const Status& reason,
                             SchedulerEvents* ev) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  const std::set<std::string> leases = it->second.leases;
  for (const auto& key : leases) {
    Job& job = jobs_.at(key);
    std::vector<int> mine;
    for (const auto& l : job.leases) {
      if (l.worker == worker_id) mine.push_back(l.attempt);
    }
    for (int a : mine) ev->failures.push_back(FailLease(job, a, reason));
  }
  RememberCredit(worker_id, it->second.credit);
  workers_.erase(worker_id);
}

void Scheduler::RememberCredit(const std::string& worker_id, int credit) {
  auto [it, inserted] = credit_memory_.insert_or_assign(worker_id, credit);
  if (inserted) credit_order_.push_back(worker_id);
  while (credit_memory_.size() > kCreditMemory && !credit_order_.empty()) {
    credit_memory_.erase(credit_order_.front());
    credit_order_.pop_front();
  }
}

SchedulerEvents Scheduler::OnReady(const WorkerInfo& info, const std::vector<AttemptRef>& held) {
  SchedulerEvents ev;
  const std::set<AttemptRef> held_set(held.begin(), held.end());
  auto it = workers_.find(info.id);
  // A draining worker (capability "draining": true) takes no new jobs, and the leases it leaves
  // out of `held` were handed back, not lost: they count as no attempt of this run.
  bool draining = false;
  if (info.capabilities.is_object()) {
    auto d = info.capabilities.find("draining");
    draining = d != info.capabilities.end() && d->is_boolean() && d->get<bool>();
  }
  if (it != workers_.end()) {
    Worker& w = it->second;
    const std::set<std::string> leases = w.leases;
    for (const auto& key : leases) {
      Job& job = jobs_.at(key);
      std::vector<int> dropped;
      for (const auto& l : job.leases) {
        if (l.worker == info.id && !l.orphan && held_set.count({key, l.attempt}) == 0) {
          dropped.push_back(l.attempt);
        }
      }
      for (int a : dropped) {
        if (draining && job.leases.size() == 1 && job.attempts_this_run > 0) {
          --job.attempts_this_run;
        }
        ev.failures.push_back(
            FailLease(job, a,
                      Status::Unavailable("worker " + info.id +
                                          (draining ? " is draining and handed back attempt "
                                                    : " re-registered without attempt ") +
                                          std::to_string(a))));
      }
    }
  } else {
    it = workers_.emplace(info.id, Worker{}).first;
    auto remembered = credit_memory_.find(info.id);
    it->second.credit =
        remembered != credit_memory_.end() ? remembered->second : options_.initial_worker_credit;
  }
  Worker& w = it->second;
  w.info = info;
  w.info.slots = std::clamp(info.slots, 1, kMaxSlots);
  w.backends = info.capabilities.is_object() && info.capabilities.contains("backends")
                   ? StringSet(info.capabilities["backends"])
                   : std::set<std::string>();
  w.models = OptionalList(info.capabilities, "models");
  w.engine_versions = OptionalList(info.capabilities, "engine_versions");
  w.prefetch = 0;
  if (info.capabilities.is_object()) {
    auto p = info.capabilities.find("prefetch");
    if (p != info.capabilities.end() && p->is_number_integer()) {
      w.prefetch = static_cast<int>(std::clamp<int64_t>(p->get<int64_t>(), 0, 3 * kMaxSlots));
    }
  }
  w.last_seen_ms = clock_.NowMs();
  w.draining = draining;

  // Leases from before a coordinator restart that name this worker: adopt or fail them.
  std::vector<std::pair<Job*, int>> orphans;
  for (const Expiry& e : expiries_) {
    const Lease* l = FindLease(*e.job, e.attempt);
    if (l != nullptr && l->orphan && l->worker == info.id) orphans.emplace_back(e.job, e.attempt);
  }
  for (const auto& [job, attempt] : orphans) {
    if (held_set.count({*job->key, attempt}) != 0) {
      Adopt(*job, *FindLease(*job, attempt), w);
      ev.adopted.push_back({*job->key, attempt});
    } else {
      ev.failures.push_back(FailLease(
          *job, attempt,
          Status::Unavailable("worker " + info.id +
                              " re-registered after a coordinator restart without attempt " +
                              std::to_string(attempt))));
    }
  }
  // Everything else it holds is a superseded attempt it still runs or has a result for: those
  // occupy its slots until it reports on them.
  w.zombies.clear();
  for (const auto& ref : held_set) {
    auto j = jobs_.find(ref.job_key);
    bool current_lease = false;
    if (j != jobs_.end() && j->second.state == State::kLeased) {
      const Lease* l = FindLease(j->second, ref.attempt);
      current_lease = l != nullptr && l->worker == info.id;
    }
    if (!current_lease) w.zombies.insert(ref);
  }
  SweepDetached();
  return ev;
}

Status Scheduler::OnHeartbeat(const std::string& worker_id) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return Status::NotFound("scheduler: unknown worker " + worker_id);
  it->second.last_seen_ms = clock_.NowMs();
  return Status::Ok();
}

void Scheduler::ExcuseSilence(int64_t ms) {
  if (ms <= 0) return;
  const int64_t now = clock_.NowMs();
  for (auto& [id, w] : workers_) w.last_seen_ms = std::min(now, w.last_seen_ms + ms);
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
  const std::string what = "result for " + *job.key + " attempt " + std::to_string(r.attempt) +
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
  Lease* lease = job.state == State::kLeased ? FindLease(job, r.attempt) : nullptr;
  if (lease != nullptr && lease->worker == worker_id) {
    if (lease->orphan) Adopt(job, *lease, w);  // READY adopts first; a result proves it too
    if (IsRetryableEngineError(r)) {
      d.verdict = ResultVerdict::kAttemptFailed;
      d.events.failures.push_back(FailLease(job, r.attempt, EngineErrorStatus(r, worker_id)));
      d.reason = d.events.failures.back().reason.ToString();
      SweepDetached();
      return d;
    }
    // First result wins: the other lease of a hedged job is superseded. Its worker still runs
    // it, so that slot stays busy until it reports.
    std::vector<std::pair<std::string, int>> losers;
    for (const auto& l : job.leases) {
      if (l.attempt != r.attempt) losers.emplace_back(l.worker, l.attempt);
    }
    while (!job.leases.empty()) DropLease(job, job.leases.front().attempt);
    for (const auto& [worker, attempt] : losers) {
      if (auto lw = workers_.find(worker); lw != workers_.end()) {
        lw->second.zombies.insert({*job.key, attempt});
      }
    }
    job.done_attempt = r.attempt;
    SetState(job, State::kDone);
    if (job.campaigns.empty()) detached_.push_back(*job.key);
    // Delivered: the worker earns one more job it may hold (up to what it claims).
    w.credit = std::min(w.credit + 1, w.info.slots + w.prefetch);
    d.verdict = ResultVerdict::kCommit;
    return d;
  }
  d.verdict = ResultVerdict::kStale;
  if (job.state == State::kFailed) {
    d.reason = what + "job already failed";
  } else if (lease != nullptr) {
    d.reason = what + "attempt is leased to " + lease->worker;
  } else if (r.attempt != job.attempt) {
    d.reason = what + "superseded by attempt " + std::to_string(job.attempt);
  } else {
    d.reason = what + "lease expired or was released";
  }
  return d;
}

SchedulerEvents Scheduler::OnDisconnect(const std::string& worker_id, const std::string& reason) {
  SchedulerEvents ev;
  RemoveWorker(worker_id, Status::Unavailable("worker " + worker_id + " disconnected: " + reason),
               &ev);
  SweepDetached();
  return ev;
}

// ---- Time --------------------------------------------------------------------------------------

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

  while (!expiries_.empty() && expiries_.begin()->t <= now) {
    const Expiry e = *expiries_.begin();
    Job& job = *e.job;
    const Lease* l = FindLease(job, e.attempt);
    const std::string worker_id = l != nullptr ? l->worker : std::string();
    const bool orphan = l != nullptr && l->orphan;
    const std::string key = *job.key;
    if (orphan) {
      ev.failures.push_back(FailLease(
          job, e.attempt,
          Status::Unavailable("lease of attempt " + std::to_string(e.attempt) + " on " + worker_id +
                              " from before a coordinator restart: the worker " +
                              "did not re-register with it in time")));
      continue;
    }
    ev.failures.push_back(
        FailLease(job, e.attempt,
                  Status::DeadlineExceeded("lease of attempt " + std::to_string(e.attempt) +
                                           " on " + worker_id + " expired after " +
                                           std::to_string(options_.lease_ms) + " ms")));
    // The worker is presumably still running it: the slot stays occupied until it reports.
    // It took a job and did not finish it in time while it kept talking: it gets fewer.
    if (auto w = workers_.find(worker_id); w != workers_.end()) {
      w->second.zombies.insert({key, e.attempt});
      w->second.credit = std::max(1, w->second.credit / 2);
    }
  }

  while (!delayed_.empty() && delayed_.begin()->first <= now) {
    Job& job = *delayed_.begin()->second;
    delayed_.erase(delayed_.begin());
    job.delayed = false;
    job.not_before_ms = 0;
    Enqueue(job);
  }

  SweepDetached();
  Grant(&ev);
  return ev;
}

bool Scheduler::CanRun(const Worker& w, const SpecCommon& c) const {
  if (w.backends.count(c.backend) == 0) return false;
  if (w.models && w.models->count(c.model_digest) == 0) return false;
  if (w.engine_versions && w.engine_versions->count(c.engine_version) == 0) return false;
  return true;
}

Scheduler::Job* Scheduler::PickJob(const Worker& w) {
  // Campaigns: higher priority first, then the fewest leased jobs (fair share), then the one
  // served longest ago. Paused campaigns and campaigns with nothing ready are skipped.
  std::vector<Campaign*> order;
  for (auto& [id, c] : campaigns_) {
    if (!c.paused && !c.ready.empty()) order.push_back(&c);
  }
  std::sort(order.begin(), order.end(), [](const Campaign* a, const Campaign* b) {
    return std::tuple(-a->priority, a->counts[static_cast<int>(State::kLeased)], a->last_grant_seq,
                      a->id) < std::tuple(-b->priority, b->counts[static_cast<int>(State::kLeased)],
                                          b->last_grant_seq, b->id);
  });
  for (Campaign* c : order) {
    // Within the campaign: higher job priority, then the model the worker has loaded, then age.
    std::optional<std::tuple<int, int, uint64_t>> best_rank;
    Job* best = nullptr;
    for (const auto& [bucket, entries] : c->ready) {
      if (!CanRun(w, *bucket.common)) continue;
      const ReadyEntry& head = *entries.begin();
      const int affinity = bucket.common->model_digest == w.last_model ? 0 : 1;
      const std::tuple<int, int, uint64_t> rank{head.neg_priority, affinity, head.seq};
      if (!best_rank || rank < *best_rank) {
        best_rank = rank;
        best = head.job;
      }
    }
    if (best != nullptr) {
      c->last_grant_seq = ++grant_seq_;
      return best;
    }
  }
  return nullptr;
}

void Scheduler::Grant(SchedulerEvents* ev) {
  const int64_t now = clock_.NowMs();
  bool granted_any = true;
  while (granted_any) {
    granted_any = false;
    std::vector<Worker*> order;
    for (auto& [id, w] : workers_) {
      if (!w.draining && w.Busy() < w.Capacity()) order.push_back(&w);
    }
    if (order.empty()) break;
    std::sort(order.begin(), order.end(), [](const Worker* a, const Worker* b) {
      return std::tuple(a->Busy(), a->last_grant_seq, a->info.id) <
             std::tuple(b->Busy(), b->last_grant_seq, b->info.id);
    });
    for (Worker* w : order) {
      Job* picked = PickJob(*w);
      if (picked != nullptr) {
        Job& job = *picked;
        Dequeue(job);
        ++job.attempt;
        ++job.attempts_this_run;
        SetState(job, State::kLeased);
        // Behind `queued` jobs in the worker's own queue (itself included), the job waits about
        // ceil(queued / slots) lease times before it starts: that wait is not its fault.
        const int64_t queued = std::max(0, w->Busy() - w->info.slots + 1);
        const int64_t lease_ms =
            options_.lease_ms * (1 + (queued + w->info.slots - 1) / w->info.slots);
        AddLease(job, *w, job.attempt, now + lease_ms);
        w->last_model = job.common->model_digest;
        w->last_grant_seq = ++grant_seq_;
        ev->grants.push_back(
            {false, w->info.id, *job.key, job.attempt, lease_ms, now + lease_ms, SpecOf(job)});
        granted_any = true;
        continue;
      }
      // A hedge goes only to an idle slot, never into a worker's prefetch queue.
      if (w->Busy() >= w->info.slots) continue;
      Job* straggler = PickHedge(*w);
      if (straggler == nullptr) continue;
      Job& job = *straggler;
      ++job.attempt;  // a new attempt, not counted in attempts_this_run
      AddLease(job, *w, job.attempt, now + options_.lease_ms);
      w->last_model = job.common->model_digest;
      w->last_grant_seq = ++grant_seq_;
      ev->grants.push_back({true, w->info.id, *job.key, job.attempt, options_.lease_ms,
                            now + options_.lease_ms, SpecOf(job)});
      granted_any = true;
    }
  }
}

Scheduler::Job* Scheduler::PickHedge(const Worker& w) {
  if (options_.hedge_after_ms <= 0) return nullptr;
  const int64_t now = clock_.NowMs();
  // Leases in deadline order are roughly in start order (jobs that queued on their worker have
  // longer leases): the first eligible one is among the slowest.
  for (const Expiry& e : expiries_) {
    Job& job = *e.job;
    if (job.leases.size() != 1) continue;
    const Lease& l = job.leases.front();
    if (l.orphan || l.worker == w.info.id) continue;
    if (now - l.started_ms < options_.hedge_after_ms) continue;
    if (!CanRun(w, *job.common)) continue;
    bool wanted = false;  // some campaign of it is still running (not paused)
    for (int64_t id : job.campaigns) {
      auto c = campaigns_.find(id);
      if (c != campaigns_.end() && !c->second.paused) wanted = true;
    }
    if (wanted) return &job;
  }
  return nullptr;
}

std::vector<SkippedJob> Scheduler::DropUnschedulable() {
  std::vector<SkippedJob> out;
  std::set<std::string> backends;
  for (const auto& [id, w] : workers_) backends.insert(w.backends.begin(), w.backends.end());
  std::string have;
  for (const auto& b : backends) have += (have.empty() ? "" : ", ") + b;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    Job& job = it->second;
    if (job.state != State::kQueued || backends.count(job.common->backend) != 0) {
      ++it;
      continue;
    }
    Dequeue(job);
    --counts_[static_cast<int>(State::kQueued)];
    for (int64_t id : job.campaigns) {
      if (Campaign* c = FindCampaign(id)) --c->counts[static_cast<int>(State::kQueued)];
    }
    out.push_back({it->first, Status::Unsupported(
                                  "no worker runs backend '" + job.common->backend +
                                  "' (workers offer: " + (have.empty() ? "none" : have) + ")")});
    it = jobs_.erase(it);
  }
  return out;
}

SchedulerEvents Scheduler::ReleaseAll(const Status& reason) {
  SchedulerEvents ev;
  for (auto& [key, job] : jobs_) {
    if (job.state != State::kLeased) continue;
    while (!job.leases.empty()) {
      const Lease l = job.leases.front();
      AttemptFailure f;
      f.job_key = key;
      f.attempt = l.attempt;
      f.worker_id = l.worker;
      f.reason = reason;
      f.will_retry = true;
      DropLease(job, l.attempt);
      ev.failures.push_back(std::move(f));
    }
    job.last_error = reason.ToString();
    SetState(job, State::kQueued);
    Enqueue(job);
  }
  return ev;
}

// ---- Queries -----------------------------------------------------------------------------------

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

std::vector<WorkerView> Scheduler::Workers() const {
  std::vector<WorkerView> out;
  for (const auto& [id, w] : workers_) {
    WorkerView v;
    v.id = id;
    v.host = w.info.host;
    v.slots = w.info.slots;
    v.prefetch = w.prefetch;
    v.busy = w.Busy();
    v.credit = w.Capacity();
    v.backends.assign(w.backends.begin(), w.backends.end());
    v.capabilities = w.info.capabilities;
    v.draining = w.draining;
    v.last_seen_ms = w.last_seen_ms;
    out.push_back(std::move(v));
  }
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
  if (!expiries_.empty()) consider(expiries_.begin()->t);
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

std::optional<JobSpec> Scheduler::SpecOfJob(const std::string& key) const {
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return std::nullopt;
  return SpecOf(it->second);
}

std::string Scheduler::LastErrorOf(const std::string& key) const {
  auto it = jobs_.find(key);
  return it == jobs_.end() ? std::string() : it->second.last_error;
}

}  // namespace nw
