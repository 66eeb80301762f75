// Store: the SQLite database of needlework. The coordinator is its only writer.
//
// Opening applies the numbered migrations in db/migrations/ (embedded in the binary) inside a
// transaction, so a database is either at the new version or untouched. A database written by a
// newer build (a higher schema version) is refused. WAL mode, a busy timeout (5 s),
// synchronous=NORMAL, foreign keys on. Every write method is one transaction (BEGIN IMMEDIATE);
// InTransaction() batches several into one. A result is committed before the coordinator
// acknowledges it. Read-only opens (reports, `nw status`) never write: every writer returns
// FailedPrecondition. Errors name the database file and what the statement was for.
//
// Job life cycle (state column of jobs):
//   queued --RecordLease--> leased --CommitResults--> done
//                             |  \--RecordFailure(will_retry)--> queued
//                             \----RecordFailure(!will_retry)--> failed
//   leased --RequeueLeased (coordinator restart)--> queued;  done|failed --RequeueJobs--> queued
//
// Fencing: the store guarantees that the FIRST result of a job wins (by key): a result for a job
// that is already done is not stored and does not change the job. It does not reject a result
// because a newer attempt was leased meanwhile: a late but valid answer for a job that is not yet
// done is accepted (the job content is addressed by key, so any attempt's answer is an answer).
// Rejecting results of stale attempts, if wanted, is the coordinator's job (it knows the
// leases). When a result is accepted, the job's other running attempts are closed as 'stale'.
//
// Thread-safety: a Store is owned by one thread; open a second read-only Store for readers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "db/campaign_control.h"
#include "protocol/job.h"

namespace nw {

enum class JobState { kQueued, kLeased, kDone, kFailed };
std::string_view JobStateName(JobState s);  // queued, leased, done, failed

/// The backend as configuration labels name it (v_job_config, migration 0007): the backend's
/// name, or for http "http:MODEL@URL" ("http-chat:MODEL@URL" with api chat), so two servers or
/// two models are two configurations.
std::string BackendLabel(const JobSpec& spec);
/// The configuration label v_job_config gives the job:
/// "topk=16 precision=fp32 backend=cpu task=niah-single haystack=noise", with " fault=NAME"
/// appended for a job replaying a known bug (migration 0008) and " sampling=<json>" for an http
/// job with sampling parameters (migration 0009).
std::string ConfigLabel(const JobSpec& spec);
Result<JobState> ParseJobState(std::string_view name);

/// One schema migration: db/migrations/NNNN_name.sql.
struct SchemaMigration {
  int version = 0;   // NNNN; a list runs 1..N without gaps
  std::string name;  // "0001_initial"
  std::string sql;   // statements; must not BEGIN/COMMIT (the store wraps them in a transaction)
};

struct CampaignRecord {
  int64_t id = 0;
  std::string name;
  std::string source_path;  // the YAML file it came from
  std::string source_text;  // the YAML text as submitted
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
};

struct JobRecord {
  std::string key;
  JobSpec spec;
  JobState state = JobState::kQueued;
  int attempts = 0;        // highest attempt number leased so far
  std::string last_error;  // last failure reason ("code: message"), if any
};

/// One row of the attempts table.
struct AttemptRecord {
  std::string job_key;
  int attempt = 0;
  std::string worker_id;
  int64_t started_ms = 0;
  int64_t lease_expires_ms = 0;
  std::optional<int64_t> ended_ms;
  std::string status;      // running | ok | failed | stale | lost
  std::string error_code;  // StatusCodeName of the failure, if any
  std::string error_message;
};

/// One lease for Store::RecordAttempts (views: valid during the call).
struct LeaseRow {
  std::string_view job_key;
  int attempt = 0;
  std::string_view worker_id;
  int64_t lease_expires_ms = 0;
};

/// One failed attempt for Store::RecordAttempts (views: valid during the call).
struct FailureRow {
  std::string_view job_key;
  int attempt = 0;
  const Status* reason = nullptr;  // not OK
  bool will_retry = false;
};

struct CampaignProgress {
  int64_t total = 0, queued = 0, leased = 0, done = 0, failed = 0;
  int64_t pass = 0, miss = 0, other = 0;  // outcomes of done jobs (other: truncated, empty, ...)
};

/// One cell of the length x position heatmap for one configuration (view v_heatmap).
struct HeatmapCell {
  std::string config;  // "topk=16 precision=fp32 backend=cpu task=niah-single haystack=noise"
  int64_t context_length = 0;
  double needle_position = 0;
  int64_t trials = 0;  // pass + miss (answers only; infrastructure failures excluded)
  int64_t passes = 0;
  int64_t errors = 0;   // engine_error + timeout + truncated + empty
  int64_t pending = 0;  // jobs of the cell without any result yet that may still run
  int64_t failed = 0;   // jobs that gave up (retries used up) without any result
};

/// The GPU busy fraction of a campaign's jobs that measured it (view v_gpu_busy).
struct GpuBusySummary {
  int64_t results = 0;  // latest results with a gpu_busy
  double total_ms = 0;  // their run time
  double gpu_busy = 0;  // weighted by run time
};

/// One row of v_boundary: where retrieval breaks for one configuration (see 0002_views.sql).
struct BoundaryRow {
  std::string config;
  int64_t lengths = 0;  // distinct tested context lengths
  int64_t min_length = 0, max_length = 0;
  std::optional<int64_t> l_pass;             // largest L: every length <= L clean at every position
  std::optional<int64_t> l_fail;             // smallest length with a miss at some position
  std::optional<int64_t> first_unclean;      // smallest length not clean (miss or no answers)
  std::optional<int64_t> max_clean;          // largest clean length anywhere
  bool monotone = true;                      // no clean length above l_fail
  int64_t fail_trials = 0, fail_passes = 0;  // answers and passes at l_fail (0 without l_fail)
  int64_t trials = 0, passes = 0, errors = 0, pending = 0;
  int64_t failed = 0;  // jobs that gave up without any result (0007)
};

/// Why jobs of one configuration ended without an answer (view v_job_failures, grouped).
struct FailureReason {
  std::string config;
  std::string kind;    // failed (retries used up, no result) | engine_error | timeout
  std::string reason;  // "unavailable: ..." (jobs.last_error, or the result's error)
  int64_t jobs = 0;
};

/// How many of a configuration's latest results had each outcome.
struct BackendTiming {
  std::string backend;
  double ms_per_token = 0;
  int64_t jobs = 0;
};

struct OutcomeCount {
  std::string config;
  Outcome outcome = Outcome::kPass;
  int64_t count = 0;
};

/// Results committed for one campaign's jobs since a moment (Store::RecentResultCounts).
struct CampaignResultCount {
  int64_t campaign_id = 0;
  int64_t results = 0;
  int64_t first_ms = 0;  // created_ms of the oldest and newest of them
  int64_t last_ms = 0;
};

/// One failure, newest first (Store::RecentFailures): a failed or lost attempt (kind
/// "attempt_failed", "attempt_lost", at its end) or a result without an answer (kind
/// "engine_error", "timeout", when committed).
struct RecentFailure {
  int64_t at_ms = 0;
  std::string job_key;
  int attempt = 0;
  std::string worker_id;
  std::string kind;
  std::string error_code;
  std::string error_message;
  std::string job_state;                 // jobs.state now
  std::optional<std::string> config;     // v_job_config's label
  std::optional<std::string> campaigns;  // names of the campaigns with the job, ", "-separated
};

/// One row of v_probe_summary: indexer probes of one layer over a configuration's answers.
struct LayerProbeStats {
  std::string config;
  int layer = 0;
  int64_t answers = 0;  // pass + miss results with a probe of this layer
  int64_t passes = 0;
  int64_t in_topk_last = 0;           // needle selected at the last prompt position
  int64_t pass_in_topk_last = 0;      // ... and the answer passed
  int64_t visible = 0;                // needle visible at some probed position
  std::optional<double> median_rank;  // median over visible answers of their median needle rank
  double mean_in_topk_fraction = 0;   // mean fraction of probed positions selecting the needle
  std::optional<int64_t> best_rank;   // lowest rank seen at any probed position
};

struct WorkerRecord {
  std::string id;
  std::string host;
  std::string device;
  nlohmann::json capabilities;
  int64_t first_seen_ms = 0;
  int64_t last_seen_ms = 0;
  std::string state;  // active | lost | gone
  /// The GPU's busy fraction over the last interval the worker reported (HEARTBEAT), that
  /// interval's length and when it arrived (wall ms); nullopt for workers that never reported.
  std::optional<double> gpu_busy;
  int64_t gpu_busy_ms = 0;
  int64_t gpu_busy_at_ms = 0;
};

/// One job of a campaign (or of a frozen baseline) with its configuration label (v_job_config)
/// and its latest result (for a baseline: the result frozen with it), if any.
struct CampaignSample {
  JobRecord job;
  std::string config;
  std::optional<JobResult> result;  // probes filled only when asked for
  int64_t result_id = 0;            // results.id (0 without a result)
  int64_t result_created_ms = 0;
};

/// A named baseline (table baselines): a campaign's results frozen by `nw baseline set`.
struct BaselineRecord {
  std::string name;
  int64_t campaign_id = 0;
  std::string campaign_name;
  std::string note;
  int64_t jobs = 0;     // frozen jobs
  int64_t results = 0;  // of those, frozen with a result
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
};

/// One verdict of the gate's flaky reruns (table flaky_verdicts).
struct FlakyVerdict {
  std::string job_key;
  std::string gate;  // "BASELINE -> CANDIDATE"
  int64_t runs = 0, passes = 0, misses = 0, errors = 0;
  std::string verdict;  // flaky | stable_pass | stable_miss | no_answer
  std::vector<int64_t> result_ids;
  int64_t decided_ms = 0;
};

class Store {
 public:
  enum class Mode { kReadWrite, kReadOnly };

  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// Opens (creating if kReadWrite) and migrates. Errors name the file. A read-only open of a
  /// database that needs migrating, or of a missing file, fails.
  static Result<std::unique_ptr<Store>> Open(const std::filesystem::path& path,
                                             Mode mode = Mode::kReadWrite);
  /// Test hook: opens with an explicit migration list instead of the embedded one.
  static Result<std::unique_ptr<Store>> OpenWithMigrations(
      const std::filesystem::path& path, Mode mode, const std::vector<SchemaMigration>& migrations);
  /// The migrations compiled into this build, in order.
  static const std::vector<SchemaMigration>& EmbeddedMigrations();
  /// Latest migration number this build knows, and the one the file is at.
  static int LatestSchemaVersion();
  Result<int> SchemaVersion();

  const std::filesystem::path& path() const;
  Mode mode() const;
  /// How long a statement waits for another connection's lock before failing (default 5000).
  Status SetBusyTimeout(int ms);
  /// A time limit on every statement (0, the default: none): one still running after `ms` is
  /// interrupted and its method fails with DeadlineExceeded, "<file>: <what it was doing>:
  /// interrupted after <ms> ms (the statement time limit)" (db/sqlite.h). The dashboard's reads
  /// run under one.
  void SetStatementLimit(int64_t ms);
  /// Another process holding the database's lock longer than the busy timeout: a write
  /// transaction that fails for that (Unavailable: SQLITE_BUSY / SQLITE_LOCKED) is run again
  /// from the start, after a pause of 100 ms doubling to 2 s, until it succeeds, `max_wait_ms`
  /// have passed, or `on_wait` returns false. `on_wait(reason, waited_ms)` is called before each
  /// pause (to report; return false to give up, e.g. on a stop request). Off (max_wait_ms = 0)
  /// unless set; only outermost transactions are retried (a write inside InTransaction() fails
  /// the whole batch, which is retried as one).
  struct BusyRetry {
    int64_t max_wait_ms = 0;
    std::function<bool(const Status& reason, int64_t waited_ms)> on_wait;
  };
  void SetBusyRetry(BusyRetry retry);
  /// The policy of `nw coordinator` and `nw run`: wait without limit while `stopping()` is false,
  /// reporting through `report` the first wait and then one line every 30 s, naming the file.
  static BusyRetry WaitForLocks(std::string who, std::function<void(const std::string&)> report,
                                std::function<bool()> stopping);

  /// Runs `body` inside one transaction (BEGIN IMMEDIATE): write methods called inside it join
  /// the transaction instead of committing on their own. Commits if `body` returns OK, rolls
  /// everything back otherwise and returns its Status. May nest (savepoints).
  Status InTransaction(const std::function<Status()>& body);
  /// Runs `body` inside one read transaction, so every read in it sees the same snapshot while
  /// the writer goes on (reports use it). Works on read-only stores. Inside InTransaction it just
  /// joins. `body` should only read.
  Status InReadTransaction(const std::function<Status()>& body);

  // ---- Campaigns ----
  /// Creates or updates the campaign by name; returns its id.
  Result<int64_t> UpsertCampaign(const std::string& name, const std::string& source_path,
                                 const std::string& source_text, int64_t now_ms);
  Result<std::optional<CampaignRecord>> FindCampaign(const std::string& name);
  Result<std::vector<CampaignRecord>> ListCampaigns();

  // ---- Jobs ----
  /// Inserts jobs that are new (by key) and links all of them to the campaign, in one
  /// transaction. Existing jobs keep their state, results and stored spec.
  Status AddJobs(int64_t campaign_id, const std::vector<JobSpec>& jobs, int64_t now_ms);
  /// AddJobs, and unlinks the campaign's jobs that are not in `jobs` (a re-submitted campaign
  /// whose expansion changed). Unlinked jobs and their results stay in the database.
  Status SetCampaignJobs(int64_t campaign_id, const std::vector<JobSpec>& jobs, int64_t now_ms);
  /// Jobs of the campaign with their state, in insertion order.
  Result<std::vector<JobRecord>> CampaignJobs(int64_t campaign_id);
  /// Up to `limit` jobs (of any campaign) in `state`, oldest first.
  Result<std::vector<JobRecord>> JobsInState(JobState state, int64_t limit);
  Result<std::optional<JobRecord>> FindJob(const std::string& key);
  /// Of the given keys, the ones already done.
  Result<std::vector<std::string>> DoneKeys(const std::vector<std::string>& keys);
  /// --rerun: puts the jobs back to queued (their old results stay in the results table and are
  /// reported until a new result replaces them). Leased jobs are left alone (their running
  /// attempt will deliver a fresh result). An unknown key fails the whole call (NotFound).
  Status RequeueJobs(const std::vector<std::string>& keys, int64_t now_ms);
  /// A campaign run or submitted again (without --rerun): of the given keys, the failed jobs
  /// whose every failed attempt was the infrastructure's doing (a lease that expired, a worker
  /// lost, gone or re-registered without it, a coordinator that stopped; never an engine error)
  /// go back to queued, so a worker that took jobs and never finished them does not fail them
  /// for good. Done jobs stay done. Returns how many were requeued; unknown keys are skipped.
  Result<int64_t> RequeueInfrastructureFailures(const std::vector<std::string>& keys,
                                                int64_t now_ms);
  /// After a coordinator restart: every leased job goes back to queued and its running attempts
  /// are closed as 'lost'; returns how many jobs.
  Result<int64_t> RequeueLeased(int64_t now_ms);

  /// Records a new attempt: job -> leased, an attempts row (key, attempt, worker, times).
  /// `attempt` must be higher than every earlier attempt of the job (FailedPrecondition
  /// otherwise). The job must be queued or leased (a second lease of a leased job is a hedge);
  /// done or failed jobs are refused with FailedPrecondition, unknown keys with NotFound.
  Status RecordLease(const std::string& key, int attempt, const std::string& worker_id,
                     int64_t lease_expires_ms, int64_t now_ms);
  /// The coordinator's batch: every failure (as RecordFailure), then every lease (as
  /// RecordLease), in one transaction, all or nothing: the first refusal rolls the whole batch
  /// back and is returned. The fast path is one statement per failure check and two per lease,
  /// with no savepoint per row and no text built unless something is refused.
  Status RecordAttempts(const std::vector<FailureRow>& failures,
                        const std::vector<LeaseRow>& leases, int64_t now_ms);
  /// All attempts of a job, by attempt number.
  Result<std::vector<AttemptRecord>> Attempts(const std::string& key);
  /// Commits results in one transaction: results + probes rows, jobs -> done, the attempt closed
  /// ('ok'). A result for a job already done is ignored (first result wins by key; its attempt is
  /// closed as 'stale'). Any outcome is final here: a retryable engine error the coordinator
  /// wants to retry goes to RecordFailure instead. A result for an unknown job fails the whole
  /// batch (NotFound) and nothing is stored.
  Status CommitResults(const std::vector<JobResult>& results, int64_t now_ms);
  /// Closes an attempt as failed with its reason; the job goes back to queued (will_retry) or to
  /// failed. The job's state is left alone when it is done, or when another attempt of it is
  /// still running (a hedge); last_error is updated unless the job is done.
  Status RecordFailure(const std::string& key, int attempt, const Status& reason, bool will_retry,
                       int64_t now_ms);

  // ---- Workers ----
  /// Inserts or updates by id; first_seen_ms of an existing worker is kept. Recording a worker
  /// as lost or gone also drops (every 64th time) the oldest inactive rows beyond the newest
  /// 4096, so the table stays bounded whatever ids peers register.
  Status UpsertWorker(const WorkerRecord& w);
  Result<std::vector<WorkerRecord>> ListWorkers();

  // ---- Reading ----
  Result<CampaignProgress> Progress(int64_t campaign_id);
  /// v_heatmap for the campaign, ordered by config, length, position.
  Result<std::vector<HeatmapCell>> Heatmap(int64_t campaign_id);
  /// v_boundary for the campaign, ordered by config.
  Result<std::vector<BoundaryRow>> Boundaries(int64_t campaign_id);
  /// Outcome counts of the latest results of the campaign's jobs, per config (no zero rows).
  Result<std::vector<OutcomeCount>> OutcomeCounts(int64_t campaign_id);
  /// v_job_failures for the campaign grouped by (config, kind, reason), most jobs first.
  Result<std::vector<FailureReason>> FailureReasons(int64_t campaign_id);
  /// v_gpu_busy: the GPU busy fraction over the campaign's latest results that carry one
  /// (weighted by their run time); nullopt when none does.
  Result<std::optional<GpuBusySummary>> CampaignGpuBusy(int64_t campaign_id);
  /// Per backend, over every answered result in the database: mean wall milliseconds per
  /// prompt token (total_ms / prompt_tokens) and how many jobs that mean is over. `nw plan`
  /// estimates cost from it.
  Result<std::vector<BackendTiming>> TimingHistory();
  /// The coordinator daemon's campaign table (coordinator_campaigns; CampaignTable writes it),
  /// by campaign id: empty when no campaign was submitted to a daemon.
  Result<std::vector<CampaignControl>> CampaignControls();
  /// Per campaign, the results committed for its jobs at or after `since_ms` (campaigns without
  /// one are absent), by campaign id.
  Result<std::vector<CampaignResultCount>> RecentResultCounts(int64_t since_ms);
  /// The latest `limit` failures (failed or lost attempts and engine_error/timeout results),
  /// newest first.
  Result<std::vector<RecentFailure>> RecentFailures(int limit);
  /// v_probe_summary for the campaign, ordered by config and layer.
  Result<std::vector<LayerProbeStats>> ProbeStats(int64_t campaign_id);
  /// Results of a campaign's jobs (latest per job), with their probes, ordered by job key.
  Result<std::vector<JobResult>> Results(int64_t campaign_id);
  /// Every job of the campaign with its configuration label and latest result (NotFound for an
  /// unknown id), in insertion order; probes are read only when `with_probes`.
  Result<std::vector<CampaignSample>> CampaignSamples(int64_t campaign_id, bool with_probes);
  /// Every result of one job with its results.id, oldest first, without probes (empty for an
  /// unknown key).
  Result<std::vector<std::pair<int64_t, JobResult>>> ResultHistory(const std::string& key);

  // ---- Baselines and flaky verdicts (nw baseline, nw gate) ----
  /// Freezes the campaign's jobs and their latest results under `name`. An existing baseline of
  /// that name is replaced (its created_ms kept) only when `replace`, else AlreadyExists. A name
  /// that is a campaign's is refused (FailedPrecondition): `nw gate` looks names up as
  /// baselines and campaigns, and a baseline would shadow the campaign. NotFound for an unknown
  /// campaign id.
  Result<BaselineRecord> SetBaseline(const std::string& name, int64_t campaign_id,
                                     const std::string& note, int64_t now_ms, bool replace = true);
  Result<std::optional<BaselineRecord>> FindBaseline(const std::string& name);
  /// All baselines, by name.
  Result<std::vector<BaselineRecord>> ListBaselines();
  /// NotFound when there is no baseline of that name.
  Status DeleteBaseline(const std::string& name);
  /// The baseline's frozen jobs with the results they had when it was set (like
  /// CampaignSamples). NotFound for an unknown name.
  Result<std::vector<CampaignSample>> BaselineSamples(const std::string& name, bool with_probes);
  /// Appends verdicts (one transaction). Unknown job keys fail the batch (NotFound).
  Status RecordFlakyVerdicts(const std::vector<FlakyVerdict>& verdicts);
  /// The verdicts recorded for a job, oldest first.
  Result<std::vector<FlakyVerdict>> FlakyVerdicts(const std::string& key);

 private:
  struct Impl;
  struct PassKey {
    explicit PassKey() = default;
  };

 public:
  /// Use Open(); PassKey keeps construction inside the class.
  Store(PassKey, std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace nw
