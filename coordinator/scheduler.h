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
// Fencing: a RESULT is accepted only for the current lease of the job, from the worker holding
// it. Results of superseded attempts (expired, requeued) are rejected, as are results from
// unknown workers; a repeat of the attempt that completed the job is a duplicate (re-ACKed).
//
// Every input returns Events (grants to send, failures to record, workers lost); the caller
// applies them in order: RecordFailure/RecordLease first, then sends. Time comes from a Clock.
// Thread-safety: none; owned by the coordinator's loop thread.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "protocol/job.h"
#include "protocol/messages.h"

namespace nw {

struct SchedulerOptions {
  int64_t heartbeat_interval_ms = 1000;
  int heartbeat_liveness = 3;               // dead after this many intervals without a word
  int64_t lease_ms = 2 * 60 * 60 * 1000;    // per-attempt time limit (2 h)
  int64_t retry_backoff_initial_ms = 1000;  // after the first failed attempt
  int64_t retry_backoff_max_ms = 32000;     // doubling, capped here
  int max_attempts = 3;                     // attempts per job in one run (>= 1)

  Status Validate() const;
};

/// A job lease to apply: RecordLease, then send JOB to the worker.
struct Grant {
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

  // ---- Jobs ----
  /// Adds a runnable (queued) job. prior_attempts: attempts started in earlier runs (from the
  /// database), so this run's attempts are numbered prior_attempts + 1, ... Higher priority runs
  /// first; equal priorities run in insertion order. AlreadyExists for a repeated key.
  Status AddJob(const std::string& key, const JobSpec& spec, int prior_attempts, int priority = 0);

  // ---- Worker input ----
  /// READY. A new worker, or a known one re-registering (new connection): its leases not in
  /// `held` fail (attempt failures), the rest are kept.
  SchedulerEvents OnReady(const WorkerInfo& info, const std::vector<AttemptRef>& held);
  /// Any message from a registered worker proves it alive. NotFound if unknown.
  Status OnHeartbeat(const std::string& worker_id);
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
  bool HasWorker(const std::string& worker_id) const;
  /// The earliest monotonic time at which Tick() may have something to do (a lease expiring, a
  /// worker to purge, a backoff ending), or nullopt.
  std::optional<int64_t> NextDeadlineMs() const;
  /// The current attempt number of a job (0 if never leased), and its state name.
  int AttemptOf(const std::string& key) const;
  std::string StateOf(const std::string& key) const;  // queued|leased|done|failed|unknown
  /// The last failure reason of a job (for tests and logs).
  std::string LastErrorOf(const std::string& key) const;

 private:
  enum class State { kQueued, kLeased, kDone, kFailed };
  struct Job {
    std::string key;
    JobSpec spec;
    int priority = 0;
    uint64_t seq = 0;
    State state = State::kQueued;
    int attempt = 0;  // last attempt number started
    int attempts_this_run = 0;
    int64_t not_before_ms = 0;  // backoff: not granted before this
    bool delayed = false;       // in delayed_ rather than ready_
    // The active lease (state kLeased).
    std::string lease_worker;
    int64_t lease_expires_ms = 0;
    int done_attempt = 0;  // the attempt whose result completed the job
    std::string last_error;
  };
  struct Worker {
    WorkerInfo info;
    std::set<std::string> backends;
    int64_t last_seen_ms = 0;
    uint64_t last_grant_seq = 0;
    std::set<std::string> leases;  // keys of jobs leased to it (current attempts)
    std::set<AttemptRef> zombies;  // expired attempts it may still be running (occupy slots)
    std::string last_model;        // model_digest of the last job granted (affinity)
    int Busy() const { return static_cast<int>(leases.size() + zombies.size()); }
  };
  // Ready jobs, bucketed by (backend, model_digest), each ordered by (-priority, seq).
  using ReadyKey = std::pair<std::pair<int, uint64_t>, std::string>;
  using Bucket = std::pair<std::string, std::string>;

  void SetState(Job& job, State s);
  void Enqueue(Job& job);
  void Dequeue(Job& job);
  // Ends the job's current lease as a failed attempt; requeues with backoff or fails the job.
  AttemptFailure FailLease(Job& job, Status reason);
  // Removes a worker, failing its leases.
  void RemoveWorker(const std::string& worker_id, const Status& reason, SchedulerEvents* ev);
  void Grant(SchedulerEvents* ev);
  std::optional<std::string> PickJob(const Worker& w) const;
  bool CanRun(const Worker& w, const Job& job) const;

  const Clock& clock_;
  SchedulerOptions options_;
  std::map<std::string, Job> jobs_;
  std::map<std::string, Worker> workers_;
  std::map<Bucket, std::set<ReadyKey>> ready_;
  std::set<std::pair<int64_t, std::string>> delayed_;   // (not_before_ms, key)
  std::set<std::pair<int64_t, std::string>> expiries_;  // (lease_expires_ms, key) of leases
  uint64_t next_seq_ = 0;
  uint64_t grant_seq_ = 0;
  int64_t counts_[4] = {0, 0, 0, 0};  // by State
};

}  // namespace nw
