// Scheduler: the coordinator's job/worker state machine, free of sockets and of the database.
//
// Jobs move queued -> leased -> done | failed. A lease is one attempt (attempt numbers grow
// per job and continue from the database's count, so an attempt number is never reused) held by
// one worker until a deadline. Workers register with slots and capabilities, and are alive while
// they are heard from at least once per `heartbeat_liveness` heartbeat intervals.
//
// Failure classes (docs/protocol.md, "Failures"):
//  * Attempt failures are infrastructure problems: the worker was lost (missed heartbeats), left
//    (DISCONNECT), re-registered without the job, the lease expired, or the engine reported a
//    retryable error (OOM, I/O, unavailable). The attempt is closed as failed, and the job is
//    requeued with backoff (1 s doubling to 32 s) until `max_attempts` attempts have been made
//    in this run; then the job is failed (quarantined) with the last reason, and has no result.
//  * Job outcomes are whatever the worker reports that is not a retryable error: pass, miss,
//    truncated, empty, timeout, and non-retryable engine errors. Such a result IS the job's
//    result row (outcome engine_error for the latter) and the job is done.
//
// Fencing: a RESULT is accepted only for a current lease of the job (one, or two with a hedge),
// from the worker holding it. Results of superseded attempts (expired, requeued) are rejected, as
// are results from unknown workers; a repeat of the attempt that completed the job is a duplicate
// (re-ACKed).
//
// Campaigns: every job belongs to one or more campaigns (a job key shared by two campaigns is one
// job, run once). Campaigns have a priority and may be paused. Across campaigns a free slot goes
// to the highest-priority campaign that has a job the worker can run; among campaigns of equal
// priority to the one with the fewest leased jobs (fair share), then to the one served longest
// ago. Within a campaign: job priority, then the model the worker last ran, then the oldest job.
// Jobs added with AddJob() belong to kDefaultCampaign (priority 0).
//
// Straggler hedging (hedge_after_ms > 0): when a worker has a free slot and no queued job it
// can run (the tail of the work), the scheduler may lease it the job whose lease is oldest, if
// that lease is older than hedge_after_ms and the job has no second lease yet. The hedge is a
// new attempt; both attempts are current, the first result wins (the other attempt is then
// stale, and its worker's slot stays busy until it reports). A failed hedge or primary leaves
// the job leased under the other; hedges do not count against max_attempts.
//
// Recovery: after a coordinator restart, jobs the database still shows leased can be added as
// orphan leases (AddOrphanLease). A worker that re-registers listing such an attempt in `held`
// adopts it (no new attempt); otherwise the attempt fails when the orphan grace period ends.
//
// Measured throughput, not the claim: a worker holds at most min(slots + prefetch, credit) jobs.
// Its credit starts at initial_worker_credit, grows by one for every result it delivers that
// completes a job (so it doubles per round trip, like TCP slow start, up to what it claims), and
// halves whenever one of its leases expires while it is still heard from (it takes jobs and
// does not finish them). A worker id keeps its credit across re-registration and loss (the last
// kCreditMemory ids are remembered), so reconnecting does not reset it. A worker that claims
// 1024 slots and never answers holds initial_worker_credit jobs, once.
//
// Queue wait counts: a job granted to a worker whose slots are all busy waits in its prefetch
// queue, so its lease is lease_ms x (1 + ceil(q / slots)), q being the jobs queued ahead of it
// and itself; a campaign of jobs that each fit the lease does not fail because they queued.
//
// Every input returns Events (grants to send, failures to record, workers lost); the caller
// applies them in order: RecordFailure/RecordLease first, then sends. Time comes from a Clock.
// Thread-safety: none; owned by the coordinator's loop thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "protocol/job.h"
#include "protocol/wire.h"

namespace nw {

struct SchedulerOptions {
  int64_t heartbeat_interval_ms = 1000;
  int heartbeat_liveness = 3;               // dead after this many intervals without a word
  int64_t lease_ms = 2 * 60 * 60 * 1000;    // per-attempt time limit (2 h)
  int64_t retry_backoff_initial_ms = 1000;  // after the first failed attempt
  int64_t retry_backoff_max_ms = 32000;     // doubling, capped here
  int max_attempts = 3;                     // attempts per job in one run (>= 1)
  int64_t orphan_grace_ms = 40'000;         // leases from before a restart wait this long for
                                            // their worker (> reconnect backoff max + liveness)
  int64_t hedge_after_ms = 0;               // > 0: straggler hedging (below); 0: off
  int initial_worker_credit = 8;            // jobs a worker may hold before it has delivered
                                            // any result (measured throughput, below)

  Status Validate() const;
};

/// A job lease to apply: RecordLease, then send JOB to the worker.
struct Grant {
  bool hedge = false;  // a second, speculative lease of a job that is already leased
  std::string worker_id;
  std::string job_key;
  int attempt = 0;
  int64_t lease_ms = 0;
  int64_t lease_expires_ms = 0;  // monotonic (Clock::NowMs)
  JobSpec spec;
};

/// A closed, failed attempt to apply: RecordFailure(job_key, attempt, reason, will_retry).
struct AttemptFailure {
  std::string job_key;
  int attempt = 0;
  std::string worker_id;
  Status reason;
  bool will_retry = false;  // false: the job is now failed
};

/// A worker declared lost (missed heartbeats).
struct LostWorker {
  std::string worker_id;
  Status reason;
};

struct SchedulerEvents {
  std::vector<AttemptFailure> failures;
  std::vector<LostWorker> lost_workers;
  std::vector<Grant> grants;
  std::vector<AttemptRef> adopted;  // orphan leases a re-registering worker took back (no write)
  bool empty() const { return failures.empty() && lost_workers.empty() && grants.empty(); }
  void Append(SchedulerEvents&& other);
};

/// What OnResult decided.
enum class ResultVerdict {
  kCommit,         // the job is done: commit this result, then ACK committed
  kAttemptFailed,  // retryable engine error: see events.failures; ACK failed
  kDuplicate,      // this attempt already completed the job: ACK duplicate (after its commit)
  kStale,          // a superseded attempt (fenced): not written; ACK rejected
  kUnknownJob,     // not a job of this run: ACK rejected
  kUnknownWorker,  // the sender is not registered: not written, no ACK (it must READY first)
};
std::string_view ResultVerdictName(ResultVerdict v);

struct ResultDecision {
  ResultVerdict verdict = ResultVerdict::kUnknownJob;
  std::string reason;  // for kStale / kUnknownJob / kUnknownWorker / kAttemptFailed
  SchedulerEvents events;
};

/// A job taken out of the run because no worker can run it.
struct SkippedJob {
  std::string job_key;
  Status reason;  // Unsupported, naming the backend
};

/// Jobs of one campaign in the scheduler, by state.
struct CampaignCounts {
  int64_t queued = 0, leased = 0, done = 0, failed = 0;
  friend bool operator==(const CampaignCounts&, const CampaignCounts&) = default;
};

/// A registered worker as the scheduler sees it (for status).
struct WorkerView {
  std::string id;
  std::string host;
  int slots = 1;
  int prefetch = 0;
  int busy = 0;    // leases + expired attempts it is presumably still running
  int credit = 0;  // jobs it may hold now (measured throughput, capped by slots + prefetch)
  std::vector<std::string> backends;
  nlohmann::json capabilities;
  bool draining = false;     // it takes no new jobs (READY capability "draining")
  int64_t last_seen_ms = 0;  // the clock's NowMs() when it was last heard from
};

/// The campaign of jobs added with AddJob().
inline constexpr int64_t kDefaultCampaign = 0;

struct SchedulerCounts {
  int64_t total = 0, queued = 0, leased = 0, done = 0, failed = 0;
  int64_t workers = 0;
  friend bool operator==(const SchedulerCounts&, const SchedulerCounts&) = default;
};

/// What a worker registered with.
struct WorkerInfo {
  std::string id;
  std::string host;
  int slots = 1;
  nlohmann::json capabilities;  // "backends" is used for matching; the rest is stored
};

class Scheduler {
 public:
  Scheduler(const Clock& clock, SchedulerOptions options);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  const SchedulerOptions& options() const { return options_; }

  // ---- Campaigns ----
  /// Registers a campaign. AlreadyExists for a repeated id.
  Status AddCampaign(int64_t id, const std::string& name, int priority, bool paused = false);
  bool HasCampaign(int64_t id) const;
  Status SetCampaignPriority(int64_t id, int priority);
  /// A paused campaign gets no new leases; its running attempts go on.
  Status SetCampaignPaused(int64_t id, bool paused);
  /// Cancels a campaign: it leaves the scheduler and its queued jobs are taken out of the
  /// schedule unless another campaign has them too (they stay queued in the database). Running
  /// attempts go on and their results are accepted. Returns how many queued jobs left.
  Result<int64_t> RemoveCampaign(int64_t id);
  /// Jobs of the campaign by state. NotFound for an unknown campaign.
  Result<CampaignCounts> CountsOf(int64_t id) const;
  /// Removes the campaigns that have no queued or leased job left (kDefaultCampaign excepted),
  /// with their finished jobs, and returns their ids. A long-running coordinator calls it so
  /// memory stays bounded by the campaigns in progress.
  std::vector<int64_t> TakeFinishedCampaigns();

  // ---- Jobs ----
  /// Adds a runnable (queued) job to kDefaultCampaign. prior_attempts: attempts started in
  /// earlier runs (from the database), so this run's attempts are numbered prior_attempts + 1,
  /// ... Higher priority runs first; equal priorities run in insertion order. AlreadyExists for a
  /// repeated key.
  Status AddJob(const std::string& key, const JobSpec& spec, int prior_attempts, int priority = 0);
  /// Adds a queued job to a campaign. A job already known (from another campaign) joins this
  /// campaign too, whatever its state; AlreadyExists if it is in this campaign already.
  Status AddCampaignJob(int64_t campaign, const std::string& key, const JobSpec& spec,
                        int prior_attempts, int priority = 0);
  /// Adds a job that the database shows leased (attempt `attempt` to `worker_id`) after a
  /// coordinator restart. The lease is kept until `lease_expires_ms` (monotonic) if the worker
  /// re-registers holding it within orphan_grace_ms; otherwise the attempt fails (unavailable).
  Status AddOrphanLease(int64_t campaign, const std::string& key, const JobSpec& spec, int attempt,
                        const std::string& worker_id, int64_t lease_expires_ms);

  /// Puts a done or failed job back to queued (a rerun); its attempts this run start again.
  /// NotFound for an unknown job; queued and leased jobs are left alone.
  Status Requeue(const std::string& key);

  // ---- Worker input ----
  /// READY. A new worker, or a known one re-registering (new connection): its leases not in
  /// `held` fail (attempt failures), the rest are kept. Orphan leases of this worker id are
  /// adopted when held and fail otherwise. Held attempts that are not leases of this worker
  /// (superseded ones it still runs) occupy its slots until it reports on them.
  SchedulerEvents OnReady(const WorkerInfo& info, const std::vector<AttemptRef>& held);
  /// Any message from a registered worker proves it alive. NotFound if unknown.
  Status OnHeartbeat(const std::string& worker_id);
  /// The coordinator itself was busy for `ms` (a long database write) and heard nobody: every
  /// registered worker counts as heard from `ms` later, so that stall is not held against them.
  void ExcuseSilence(int64_t ms);
  /// RESULT from a worker (also counts as a heartbeat).
  ResultDecision OnResult(const std::string& worker_id, const JobResult& result);
  /// DISCONNECT: the worker is gone; its leases fail at once (attempt failures).
  SchedulerEvents OnDisconnect(const std::string& worker_id, const std::string& reason);

  // ---- Time ----
  /// Purges dead workers, expires leases, releases jobs whose backoff has passed, and grants
  /// queued jobs to workers with free slots and a matching backend (higher priority first, then
  /// a job for the model the worker last ran, then oldest).
  SchedulerEvents Tick();

  /// Removes from this run every queued job that no registered worker can run (no worker
  /// advertises its backend) and returns them with the reason. For runs whose set of workers is
  /// complete (embedded): such jobs are not failed, they stay queued in the database for a run
  /// with suitable workers.
  std::vector<SkippedJob> DropUnschedulable();
  /// Closes every active lease as a failed attempt that will be retried (the coordinator is
  /// stopping; the next run requeues them). The jobs go back to queued here too.
  SchedulerEvents ReleaseAll(const Status& reason);

  // ---- Queries ----
  /// True when every job is done or failed.
  bool Finished() const;
  SchedulerCounts Counts() const;
  std::vector<std::string> WorkerIds() const;
  std::vector<WorkerView> Workers() const;
  bool HasWorker(const std::string& worker_id) const;
  /// The earliest monotonic time at which Tick() may have something to do (a lease expiring, a
  /// worker to purge, a backoff ending), or nullopt.
  std::optional<int64_t> NextDeadlineMs() const;
  /// The current attempt number of a job (0 if never leased), and its state name.
  int AttemptOf(const std::string& key) const;
  std::string StateOf(const std::string& key) const;  // queued|leased|done|failed|unknown
  /// The spec of a job of this run, or nullopt.
  std::optional<JobSpec> SpecOfJob(const std::string& key) const;
  /// The last failure reason of a job (for tests and logs).
  std::string LastErrorOf(const std::string& key) const;

 private:
  enum class State : uint8_t { kQueued, kLeased, kDone, kFailed };
  // The parts of a JobSpec that many jobs share, interned (a few per campaign), so a queued job
  // costs a few hundred bytes.
  struct SpecCommon {
    std::string model_dir, model_digest, engine_version, task, haystack, backend, fault;
    PrecisionProfile precision;
    std::optional<HttpBackendSpec> http;  // backend "http": the server and its settings
  };
  // One lease of a job: an attempt on a worker until a deadline.
  struct Lease {
    std::string worker;
    int attempt = 0;
    int64_t started_ms = 0;
    int64_t expires_ms = 0;         // orphans: min(lease expiry, end of the grace period)
    bool orphan = false;            // leased before a restart, not yet adopted by its worker
    int64_t orphan_expires_ms = 0;  // orphans: the lease's own expiry, kept on adoption
  };
  struct Job {
    const std::string* key = nullptr;  // the jobs_ map key
    const SpecCommon* common = nullptr;
    int64_t context_length = 0;
    double needle_position = 0;
    int64_t seed = 0;
    int32_t topk = 0, trial = 0, max_new_tokens = 0;
    bool probe = false;
    State state = State::kQueued;
    bool delayed = false;  // in delayed_ rather than the ready queues
    int priority = 0;
    uint64_t seq = 0;
    int attempt = 0;  // the highest attempt number started
    int attempts_this_run = 0;
    int done_attempt = 0;       // the attempt whose result completed the job
    int64_t not_before_ms = 0;  // backoff: not granted before this
    std::vector<Lease> leases;  // state kLeased: one, or two with a hedge
    std::string last_error;
    std::vector<int64_t> campaigns;  // ids, usually one
  };
  struct JobOrder {
    // Deadlines ordered by time, then by job age (deterministic).
    bool operator()(const std::pair<int64_t, Job*>& a, const std::pair<int64_t, Job*>& b) const {
      return a.first != b.first ? a.first < b.first : a.second->seq < b.second->seq;
    }
  };
  // A lease deadline: (time, job, attempt), ordered by time, job age, attempt.
  struct Expiry {
    int64_t t = 0;
    Job* job = nullptr;
    int attempt = 0;
    friend bool operator<(const Expiry& a, const Expiry& b) {
      if (a.t != b.t) return a.t < b.t;
      if (a.job->seq != b.job->seq) return a.job->seq < b.job->seq;
      return a.attempt < b.attempt;
    }
  };
  struct ReadyEntry {
    int neg_priority = 0;
    uint64_t seq = 0;
    Job* job = nullptr;
    friend bool operator<(const ReadyEntry& a, const ReadyEntry& b) {
      return a.neg_priority != b.neg_priority ? a.neg_priority < b.neg_priority : a.seq < b.seq;
    }
  };
  // Ready jobs of a campaign bucketed by what a worker must offer to run them.
  struct Bucket {
    const SpecCommon* common;  // backend, model_digest, engine_version
    friend bool operator<(const Bucket& a, const Bucket& b) { return a.common < b.common; }
  };
  struct Campaign {
    int64_t id = 0;
    std::string name;
    int priority = 0;
    bool paused = false;
    uint64_t last_grant_seq = 0;
    int64_t counts[4] = {0, 0, 0, 0};  // member jobs by State
    std::map<Bucket, std::set<ReadyEntry>> ready;
  };
  struct Worker {
    WorkerInfo info;
    std::set<std::string> backends;
    std::optional<std::set<std::string>> models;           // absent: any model
    std::optional<std::set<std::string>> engine_versions;  // absent: any
    int prefetch = 0;
    int64_t last_seen_ms = 0;
    uint64_t last_grant_seq = 0;
    std::set<std::string> leases;  // keys of jobs leased to it (current attempts)
    std::set<AttemptRef> zombies;  // attempts it holds that are not its leases (occupy slots)
    std::string last_model;        // model_digest of the last job granted (affinity)
    int credit = 0;                // measured throughput: jobs it may hold (see the top)
    bool draining = false;         // READY said "draining": no new leases
    int Busy() const { return static_cast<int>(leases.size() + zombies.size()); }
    int Capacity() const { return std::min(info.slots + prefetch, credit); }
  };
  // Credits of worker ids no longer registered, so that re-registering resets nothing.
  static constexpr size_t kCreditMemory = 4096;
  void RememberCredit(const std::string& worker_id, int credit);

  const SpecCommon* Intern(const JobSpec& spec);
  JobSpec SpecOf(const Job& job) const;
  Job& NewJob(const std::string& key, const JobSpec& spec, int prior_attempts, int priority);
  Campaign* FindCampaign(int64_t id);
  void SetState(Job& job, State s);
  void Enqueue(Job& job);
  void Dequeue(Job& job);
  void EnqueueIn(Campaign& c, Job& job);
  void DequeueFrom(Campaign& c, Job& job);
  Lease* FindLease(Job& job, int attempt);
  // Ends one lease of the job as a failed attempt. If it was the last, the job is requeued with
  // backoff or failed; otherwise it stays leased under its other lease.
  AttemptFailure FailLease(Job& job, int attempt, Status reason);
  // Drops a lease's bookkeeping (worker, expiry) and removes it from the job.
  void DropLease(Job& job, int attempt);
  // An orphan lease becomes the worker's lease again, with its own expiry.
  void Adopt(Job& job, Lease& lease, Worker& w);
  void AddLease(Job& job, Worker& w, int attempt, int64_t expires_ms);
  // Removes a worker, failing its leases.
  void RemoveWorker(const std::string& worker_id, const Status& reason, SchedulerEvents* ev);
  void Grant(SchedulerEvents* ev);
  Job* PickJob(const Worker& w);
  Job* PickHedge(const Worker& w);
  bool CanRun(const Worker& w, const SpecCommon& c) const;
  // Erases jobs that belong to no campaign any more and are not running.
  void SweepDetached();

  const Clock& clock_;
  SchedulerOptions options_;
  std::map<std::string, Job> jobs_;
  std::map<std::string, Worker> workers_;
  std::map<int64_t, Campaign> campaigns_;
  std::map<std::string, std::unique_ptr<SpecCommon>> spec_pool_;
  std::set<std::pair<int64_t, Job*>, JobOrder> delayed_;  // (not_before_ms, job)
  std::set<Expiry> expiries_;                             // every lease's deadline
  std::vector<std::string> detached_;                     // keys of jobs left without a campaign
  std::map<std::string, int> credit_memory_;              // worker id -> credit (bounded)
  std::deque<std::string> credit_order_;                  // insertion order of credit_memory_
  uint64_t next_seq_ = 0;
  uint64_t grant_seq_ = 0;
  int64_t counts_[4] = {0, 0, 0, 0};  // by State
};

}  // namespace nw
