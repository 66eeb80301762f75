#include "db/store.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "db/checkpointer.h"
#include "db/migrations.h"
#include "db/schema.h"
#include "db/sqlite.h"

namespace nw {

using db_internal::Db;
using db_internal::Query;
using db_internal::Txn;
using json = nlohmann::json;

std::string BackendLabel(const JobSpec& spec) {
  if (spec.backend != "http" || !spec.http) return spec.backend;
  return std::string(spec.http->api == "chat" ? "http-chat" : "http") + ":" + spec.http->model +
         "@" + spec.http->url;
}

std::string ConfigLabel(const JobSpec& spec) {
  return "topk=" + std::to_string(spec.topk) + " precision=" + spec.precision.name +
         " backend=" + BackendLabel(spec) + " task=" + spec.task + " haystack=" + spec.haystack +
         (spec.fault != "none" && !spec.fault.empty() ? " fault=" + spec.fault : "") +
         (spec.backend == "http" && spec.http && !spec.http->sampling.empty()
              ? " sampling=" + spec.http->sampling.ToJson().dump()
              : "");
}

std::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kQueued:
      return "queued";
    case JobState::kLeased:
      return "leased";
    case JobState::kDone:
      return "done";
    case JobState::kFailed:
      return "failed";
  }
  return "queued";
}

Result<JobState> ParseJobState(std::string_view name) {
  for (JobState s : {JobState::kQueued, JobState::kLeased, JobState::kDone, JobState::kFailed}) {
    if (JobStateName(s) == name) return s;
  }
  return Status::InvalidArgument("unknown job state '" + std::string(name) + "'");
}

namespace {

constexpr int kDefaultBusyTimeoutMs = 5000;

// The streaming latency columns (migration 0009) from column `first` on: ttft_ms, tpot_ms,
// itl_p50_ms, itl_p95_ms, stream_events; nullopt when the result did not stream.
std::optional<StreamTiming> ReadStreamTiming(const Query& q, int first) {
  const std::optional<double> ttft = q.OptReal(first);
  if (!ttft) return std::nullopt;
  StreamTiming t;
  t.ttft_ms = *ttft;
  t.tpot_ms = q.OptReal(first + 1).value_or(0);
  t.itl_p50_ms = q.OptReal(first + 2).value_or(0);
  t.itl_p95_ms = q.OptReal(first + 3).value_or(0);
  t.events = q.OptInt(first + 4).value_or(0);
  return t;
}
// Rows of workers that are lost or gone kept in table workers (the newest by last_seen_ms).
constexpr int64_t kMaxInactiveWorkerRows = 4096;
constexpr int64_t kWorkerPruneEvery = 64;
// WAL size (pages) that wakes the checkpointer: SQLite's own auto-checkpoint default.
constexpr int kCheckpointPages = 1000;
// The writer's page cache, KiB (SQLite's default is 2 MiB).
constexpr int kCacheKib = 32 * 1024;

// Columns of jobs read into a JobRecord, in this order.
constexpr const char* kJobColumns = "j.key, j.spec_json, j.state, j.attempts, j.last_error";

Result<JobRecord> ReadJob(const Db& db, const Query& q) {
  JobRecord r;
  r.key = q.Text(0);
  const std::string where = db.file() + ": table jobs, key " + r.key;
  json spec_j;
  try {
    spec_j = json::parse(q.Text(1));
  } catch (const json::exception& e) {
    return Status::Corruption(where + ": spec_json is not JSON (" + e.what() + ")");
  }
  auto spec = JobSpec::FromJson(spec_j);
  if (!spec.ok())
    return Status(StatusCode::kCorruption, spec.status().message()).WithContext(where);
  r.spec = std::move(spec).value();
  auto state = ParseJobState(q.Text(2));
  if (!state.ok()) return Status::Corruption(where + ": " + state.status().message());
  r.state = *state;
  r.attempts = static_cast<int>(q.Int(3));
  r.last_error = q.Text(4);
  return r;
}

Result<std::vector<int32_t>> ParseIntArray(const Db& db, const std::string& text,
                                           const std::string& what) {
  try {
    return json::parse(text).get<std::vector<int32_t>>();
  } catch (const json::exception& e) {
    return Status::Corruption(db.file() + ": " + what + ": not a JSON array of integers (" +
                              e.what() + ")");
  }
}

bool IsErrorOutcome(Outcome o) { return o == Outcome::kEngineError || o == Outcome::kTimeout; }

}  // namespace

struct Store::Impl {
  std::filesystem::path path;
  Mode mode = Mode::kReadWrite;
  std::unique_ptr<Db> db;
  // Read-write file stores: WAL checkpoints off the writer's thread (db/checkpointer.h).
  // Declared after db: stopped before the connection closes.
  std::unique_ptr<db_internal::WalCheckpointer> checkpointer;

  const std::string& file() const { return db->file(); }

  Status Writable(std::string_view what) const {
    if (mode == Mode::kReadOnly) {
      return Status::FailedPrecondition(file() + ": " + std::string(what) +
                                        ": the database is open read-only");
    }
    return Status::Ok();
  }

  // Runs body() in one write transaction (or a savepoint inside InTransaction()). An outermost
  // transaction that another process's lock made fail is run again (SetBusyRetry); body() must
  // therefore only assign its results, never accumulate them across runs.
  template <typename F>
  Status Write(std::string_view purpose, F&& body) {
    NW_RETURN_IF_ERROR(Writable(purpose));
    const bool outermost = db->txn_depth() == 0;
    const auto start = std::chrono::steady_clock::now();
    int64_t pause_ms = 100;
    while (true) {
      Status st = WriteOnce(purpose, body);
      if (st.code() != StatusCode::kUnavailable || !outermost || busy_retry.max_wait_ms <= 0) {
        return st;
      }
      const int64_t waited = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::steady_clock::now() - start)
                                 .count();
      if (waited >= busy_retry.max_wait_ms) {
        return Status(st.code(), st.message() + " (still locked after " + std::to_string(waited) +
                                     " ms of retries)");
      }
      if (busy_retry.on_wait && !busy_retry.on_wait(st, waited)) return st;
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
      pause_ms = std::min<int64_t>(pause_ms * 2, 2000);
    }
  }
  template <typename F>
  Status WriteOnce(std::string_view purpose, F&& body) {
    Txn txn(*db);
    NW_RETURN_IF_ERROR(txn.Begin(purpose));
    NW_RETURN_IF_ERROR(body());
    return txn.Commit();
  }
  BusyRetry busy_retry;
  int64_t departures = 0;  // workers recorded lost or gone (UpsertWorker's pruning)

  Status CheckCampaign(int64_t campaign_id) {
    Query q(*db, "SELECT 1 FROM campaigns WHERE id = ?", "looking up a campaign");
    q.Bind(1, campaign_id);
    NW_ASSIGN_OR_RETURN(bool found, q.Step());
    if (!found) {
      return Status::NotFound(file() + ": campaign id " + std::to_string(campaign_id) +
                              " is not in table campaigns");
    }
    return Status::Ok();
  }

  // The job's state, or NotFound naming the key.
  Result<std::pair<JobState, int>> JobStateOf(std::string_view key, const char* purpose) {
    Query q(*db, "SELECT state, attempts FROM jobs WHERE key = ?", purpose);
    q.Bind(1, key);
    NW_ASSIGN_OR_RETURN(bool found, q.Step());
    if (!found) {
      return Status::NotFound(file() + ": " + purpose + ": job " + std::string(key) +
                              " is not in table jobs");
    }
    NW_ASSIGN_OR_RETURN(JobState s, ParseJobState(q.TextView(0)));
    return std::make_pair(s, static_cast<int>(q.Int(1)));
  }

  // One lease (RecordLease / RecordAttempts), inside a transaction. The success path is two
  // statements: an UPDATE that only matches a job that may take this attempt, and the INSERT.
  Status LeaseLocked(const LeaseRow& l, int64_t now_ms) {
    if (l.attempt < 1) return LeaseRefusal(l);
    {
      Query q(*db,
              "UPDATE jobs SET state = 'leased', attempts = ?2, updated_ms = ?3"
              " WHERE key = ?1 AND state IN ('queued', 'leased') AND attempts < ?2",
              "marking a job leased in table jobs");
      q.Bind(1, l.job_key).Bind(2, l.attempt).Bind(3, now_ms);
      NW_RETURN_IF_ERROR(q.Run());
      if (q.Changes() != 1) return LeaseRefusal(l);
    }
    Query q(*db,
            "INSERT INTO attempts (job_key, attempt, worker_id, started_ms, lease_expires_ms,"
            " status) VALUES (?, ?, ?, ?, ?, 'running')",
            "inserting into table attempts");
    q.Bind(1, l.job_key)
        .Bind(2, l.attempt)
        .Bind(3, l.worker_id)
        .Bind(4, now_ms)
        .Bind(5, l.lease_expires_ms);
    return q.Run();
  }

  // Why a lease was refused (the slow path: the job is read again to say so).
  Status LeaseRefusal(const LeaseRow& l) {
    const std::string what = file() + ": leasing job " + std::string(l.job_key) + " attempt " +
                             std::to_string(l.attempt) + " to worker '" + std::string(l.worker_id) +
                             "'";
    if (l.attempt < 1) return Status::InvalidArgument(what + ": attempts are numbered from 1");
    NW_ASSIGN_OR_RETURN(auto state, JobStateOf(l.job_key, "recording a lease"));
    if (state.first == JobState::kDone || state.first == JobState::kFailed) {
      return Status::FailedPrecondition(
          what + ": the job is " + std::string(JobStateName(state.first)) +
          (state.first == JobState::kFailed ? " (requeue it first)" : ""));
    }
    return Status::FailedPrecondition(what + ": not newer than attempt " +
                                      std::to_string(state.second) + " already leased");
  }

  // One failed attempt (RecordFailure / RecordAttempts), inside a transaction.
  Status FailureLocked(std::string_view key, int attempt, const Status& reason, bool will_retry,
                       int64_t now_ms) {
    NW_ASSIGN_OR_RETURN(auto state, JobStateOf(key, "recording a failure"));
    {
      // Close the attempt if it is still open; it must exist.
      Query q(*db,
              "UPDATE attempts SET status = CASE WHEN status IN ('running', 'lost') THEN 'failed'"
              " ELSE status END,"
              " ended_ms = CASE WHEN status IN ('running', 'lost') THEN ?1 ELSE ended_ms END,"
              " error_code = CASE WHEN status IN ('running', 'lost') THEN ?2 ELSE error_code END,"
              " error_message = CASE WHEN status IN ('running', 'lost') THEN ?3"
              " ELSE error_message END"
              " WHERE job_key = ?4 AND attempt = ?5",
              "closing a failed attempt in table attempts");
      q.Bind(1, now_ms)
          .Bind(2, StatusCodeName(reason.code()))
          .Bind(3, reason.message())
          .Bind(4, key)
          .Bind(5, attempt);
      NW_RETURN_IF_ERROR(q.Run());
      if (q.Changes() != 1) {
        return Status::NotFound(file() + ": recording failure of job " + std::string(key) +
                                " attempt " + std::to_string(attempt) +
                                ": no such attempt in table attempts");
      }
    }
    if (state.first == JobState::kDone) return Status::Ok();
    // Another attempt still running (a hedge) keeps the job leased.
    Query q(*db,
            "UPDATE jobs SET state = CASE WHEN EXISTS (SELECT 1 FROM attempts WHERE job_key = ?5"
            " AND status = 'running' AND attempt <> ?6) THEN state WHEN ?1 THEN 'queued'"
            " ELSE 'failed' END, last_error = ?2, updated_ms = ?3 WHERE key = ?4",
            "recording a failure in table jobs");
    q.Bind(1, will_retry)
        .Bind(2, reason.ToString())
        .Bind(3, now_ms)
        .Bind(4, key)
        .Bind(5, key)
        .Bind(6, attempt);
    return q.Run();
  }

  Status AddJobsLocked(int64_t campaign_id, const std::vector<JobSpec>& jobs, int64_t now_ms) {
    NW_RETURN_IF_ERROR(CheckCampaign(campaign_id));
    for (const JobSpec& spec : jobs) {
      const std::string key = spec.Key();
      {
        Query q(*db,
                "INSERT INTO jobs (key, spec_json, model_digest, engine_version, task, haystack,"
                " context_length, needle_position, topk, precision, precision_json, backend, seed,"
                " trial, max_new_tokens, probe, state, attempts, last_error, created_ms,"
                " updated_ms, fault)"
                " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,"
                " 'queued', 0, '', ?17, ?17, ?18)"
                " ON CONFLICT (key) DO NOTHING",
                "inserting into table jobs");
        q.Bind(1, key)
            .Bind(2, spec.ToJson().dump())
            .Bind(3, spec.model_digest)
            .Bind(4, spec.engine_version)
            .Bind(5, spec.task)
            .Bind(6, spec.haystack)
            .Bind(7, spec.context_length)
            .Bind(8, spec.needle_position)
            .Bind(9, spec.topk)
            .Bind(10, spec.precision.name)
            .Bind(11, spec.precision.ToJson().dump())
            .Bind(12, spec.backend)
            .Bind(13, spec.seed)
            .Bind(14, spec.trial)
            .Bind(15, spec.max_new_tokens)
            .Bind(16, spec.probe)
            .Bind(17, now_ms)
            .Bind(18, spec.fault);
        NW_RETURN_IF_ERROR(q.Run());
      }
      Query link(*db,
                 "INSERT INTO campaign_jobs (campaign_id, job_key) VALUES (?, ?)"
                 " ON CONFLICT DO NOTHING",
                 "inserting into table campaign_jobs");
      link.Bind(1, campaign_id).Bind(2, key);
      NW_RETURN_IF_ERROR(link.Run());
    }
    return Status::Ok();
  }

  Result<std::vector<JobRecord>> ReadJobs(Query& q) {
    std::vector<JobRecord> out;
    while (true) {
      NW_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      NW_ASSIGN_OR_RETURN(JobRecord r, ReadJob(*db, q));
      out.push_back(std::move(r));
    }
    return out;
  }

  // A result that was not inserted: an unknown job (NotFound), a job already done (first result
  // wins: its attempt, if still open, is superseded), or the same attempt's result delivered
  // twice (e.g. after --rerun requeued the job; nothing changes).
  Status NotCommitted(const JobResult& r, int64_t now_ms) {
    NW_ASSIGN_OR_RETURN(auto state, JobStateOf(r.job_key, "committing a result"));
    if (state.first != JobState::kDone) return Status::Ok();
    Query q(*db,
            "UPDATE attempts SET status = 'stale', ended_ms = ?"
            " WHERE job_key = ? AND attempt = ? AND status = 'running'",
            "closing a superseded attempt in table attempts");
    q.Bind(1, now_ms).Bind(2, r.job_key).Bind(3, r.attempt);
    return q.Run();
  }

  Status CommitOne(const JobResult& r, int64_t now_ms) {
    {
      // The success path in one statement: stored only if the job exists and is not done, and
      // only once per (job, attempt) (the conflict on UNIQUE (job_key, attempt) inserts nothing).
      Query q(*db,
              "INSERT INTO results (job_key, attempt, outcome, generated_text, expected,"
              " needle_token_offset, prompt_hash, prompt_tokens, generated_tokens, prefill_ms,"
              " decode_ms, total_ms, worker_id, device, engine_version, error_code, error_message,"
              " retryable, created_ms, ttft_ms, tpot_ms, itl_p50_ms, itl_p95_ms, stream_events)"
              " SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,"
              " ?18, ?19, ?20, ?21, ?22, ?23, ?24 WHERE EXISTS (SELECT 1 FROM jobs WHERE key = ?1 "
              "AND state <> 'done')"
              " ON CONFLICT (job_key, attempt) DO NOTHING",
              "inserting into table results");
      q.Bind(1, r.job_key)
          .Bind(2, r.attempt)
          .Bind(3, OutcomeName(r.outcome))
          .Bind(4, r.generated_text)
          .Bind(5, r.expected)
          .Bind(6, r.needle_token_offset)
          .Bind(7, r.prompt_hash)
          .Bind(8, r.prompt_tokens)
          .Bind(9, r.generated_tokens)
          .Bind(10, r.prefill_ms)
          .Bind(11, r.decode_ms)
          .Bind(12, r.total_ms)
          .Bind(13, r.worker_id)
          .Bind(14, r.device)
          .Bind(15, r.engine_version)
          .Bind(16, r.error_code)
          .Bind(17, r.error_message)
          .Bind(18, r.retryable)
          .Bind(19, now_ms);
      if (r.stream) {
        q.Bind(20, r.stream->ttft_ms)
            .Bind(21, r.stream->tpot_ms)
            .Bind(22, r.stream->itl_p50_ms)
            .Bind(23, r.stream->itl_p95_ms)
            .Bind(24, r.stream->events);
      } else {
        for (int i = 20; i <= 24; ++i) q.BindNull(i);
      }
      NW_RETURN_IF_ERROR(q.Run());
      if (q.Changes() == 0) return NotCommitted(r, now_ms);
    }
    const int64_t result_id = sqlite3_last_insert_rowid(db->get());
    for (const ProbeSummary& p : r.probes) {
      Query q(*db,
              "INSERT INTO probes (result_id, job_key, layer, positions, needle_rank_min,"
              " needle_rank_median, in_topk_fraction, in_topk_last, topk, ranks_json,"
              " topk_last_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
              "inserting into table probes");
      q.Bind(1, result_id)
          .Bind(2, r.job_key)
          .Bind(3, p.layer)
          .Bind(4, p.positions)
          .Bind(5, p.needle_rank_min)
          .Bind(6, p.needle_rank_median)
          .Bind(7, p.in_topk_fraction)
          .Bind(8, p.in_topk_last)
          .Bind(9, p.topk)
          .Bind(10, json(p.ranks).dump())
          .Bind(11, json(p.topk_last).dump());
      NW_RETURN_IF_ERROR(q.Run());
    }
    {
      Query q(*db,
              "UPDATE jobs SET state = 'done', updated_ms = ?1, attempts = MAX(attempts, ?2),"
              " last_error = CASE WHEN ?3 <> '' THEN ?3 ELSE last_error END WHERE key = ?4",
              "marking a job done in table jobs");
      q.Bind(1, now_ms).Bind(2, r.attempt).Bind(4, r.job_key);
      if (IsErrorOutcome(r.outcome)) {
        q.Bind(3,
               std::string(OutcomeName(r.outcome)) + ": " + r.error_code + ": " + r.error_message);
      } else {
        q.Bind(3, "");
      }
      NW_RETURN_IF_ERROR(q.Run());
    }
    // The delivering attempt becomes 'ok' (whatever it was); the job's other running attempts
    // are superseded ('stale'). One statement over the job's attempts (primary key prefix).
    Query q(*db,
            "UPDATE attempts SET"
            " status = CASE WHEN attempt = ?2 THEN 'ok' ELSE 'stale' END, ended_ms = ?3,"
            " error_code = CASE WHEN attempt = ?2 THEN ?4 ELSE error_code END,"
            " error_message = CASE WHEN attempt = ?2 THEN ?5 ELSE error_message END"
            " WHERE job_key = ?1 AND (attempt = ?2 OR status = 'running')",
            "closing attempts in table attempts");
    q.Bind(1, r.job_key)
        .Bind(2, r.attempt)
        .Bind(3, now_ms)
        .Bind(4, r.error_code)
        .Bind(5, r.error_message);
    return q.Run();
  }
};

Store::Store(PassKey, std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

const std::vector<SchemaMigration>& Store::EmbeddedMigrations() {
  static const std::vector<SchemaMigration> kMigrations = [] {
    std::vector<SchemaMigration> out;
    for (size_t i = 0; i < db_internal::kEmbeddedMigrationCount; ++i) {
      const db_internal::EmbeddedMigration& e = db_internal::kEmbeddedMigrations[i];
      SchemaMigration m;
      m.version = e.version;
      m.name = e.name;
      for (size_t p = 0; p < e.piece_count; ++p) m.sql += e.pieces[p];
      out.push_back(std::move(m));
    }
    return out;
  }();
  return kMigrations;
}

int Store::LatestSchemaVersion() { return static_cast<int>(EmbeddedMigrations().size()); }

Result<std::unique_ptr<Store>> Store::Open(const std::filesystem::path& path, Mode mode) {
  return OpenWithMigrations(path, mode, EmbeddedMigrations());
}

Result<std::unique_ptr<Store>> Store::OpenWithMigrations(
    const std::filesystem::path& path, Mode mode, const std::vector<SchemaMigration>& migrations) {
  const std::string file = path.string();
  const bool read_only = mode == Mode::kReadOnly;
  const bool memory = file == ":memory:" || file.empty();
  if (read_only && !memory) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      return Status::NotFound(file + ": no such database (a read-only open never creates one)");
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->mode = mode;
  NW_ASSIGN_OR_RETURN(impl->db, Db::Open(file, read_only));
  Db& db = *impl->db;
  const int rc = sqlite3_busy_timeout(db.get(), kDefaultBusyTimeoutMs);
  if (rc != SQLITE_OK) return db.Error(rc, "setting the busy timeout");
  NW_RETURN_IF_ERROR(db.Exec("PRAGMA foreign_keys = ON", "enabling foreign keys"));
  if (read_only) {
    NW_RETURN_IF_ERROR(db.Exec("PRAGMA query_only = ON", "setting PRAGMA query_only"));
  } else {
    Query q(db, "PRAGMA journal_mode = WAL", "switching to WAL mode");
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    const std::string journal = row ? q.Text(0) : std::string();
    if (journal != "wal" && !(memory && journal == "memory")) {
      return Status::Unsupported(file + ": switching to WAL mode: the journal mode is '" + journal +
                                 "' (WAL needs a local file system)");
    }
  }
  if (!read_only) {
    NW_RETURN_IF_ERROR(db.Exec("PRAGMA synchronous = NORMAL", "setting PRAGMA synchronous"));
    // The coordinator touches pages at random (keys are SHA-256): keep the recently written ones
    // (in the WAL, read back with read(2)) and the hot index pages in SQLite's cache. (A memory
    // map of the file was measured too: no faster, and it counts the file in RSS.)
    NW_RETURN_IF_ERROR(
        db.Exec("PRAGMA cache_size = -" + std::to_string(kCacheKib), "setting PRAGMA cache_size"));
  }
  NW_RETURN_IF_ERROR(db_internal::Migrate(db, migrations));
  if (!read_only && !memory) {
    NW_ASSIGN_OR_RETURN(impl->checkpointer,
                        db_internal::WalCheckpointer::Start(db, kCheckpointPages));
  }
  return std::make_unique<Store>(PassKey(), std::move(impl));
}

Result<int> Store::SchemaVersion() { return db_internal::ReadSchemaVersion(*impl_->db); }

const std::filesystem::path& Store::path() const { return impl_->path; }
Store::Mode Store::mode() const { return impl_->mode; }

Status Store::SetBusyTimeout(int ms) {
  const int rc = sqlite3_busy_timeout(impl_->db->get(), ms);
  if (rc != SQLITE_OK) return impl_->db->Error(rc, "setting the busy timeout");
  return Status::Ok();
}

void Store::SetBusyRetry(BusyRetry retry) { impl_->busy_retry = std::move(retry); }

Store::BusyRetry Store::WaitForLocks(std::string who,
                                     std::function<void(const std::string&)> report,
                                     std::function<bool()> stopping) {
  BusyRetry r;
  r.max_wait_ms = std::numeric_limits<int64_t>::max();
  // One report on the first wait, then at most one every 30 s, across transactions.
  auto next_report = std::make_shared<std::chrono::steady_clock::time_point>();
  r.on_wait = [who = std::move(who), report = std::move(report), stopping = std::move(stopping),
               next_report](const Status& reason, int64_t waited_ms) {
    if (stopping && stopping()) return false;
    const auto now = std::chrono::steady_clock::now();
    if (now < *next_report) return true;
    *next_report = now + std::chrono::seconds(30);
    if (report) {
      report(who + ": another process holds the database lock (" + reason.message() +
             "); waiting and retrying (" + std::to_string(waited_ms / 1000) + " s so far)");
    }
    return true;
  };
  return r;
}

Status Store::InTransaction(const std::function<Status()>& body) {
  return impl_->Write("running a batch", body);
}

Status Store::InReadTransaction(const std::function<Status()>& body) {
  Txn txn(*impl_->db);
  NW_RETURN_IF_ERROR(txn.BeginRead("reading a snapshot"));
  NW_RETURN_IF_ERROR(body());
  return txn.Commit();
}

// ---- Campaigns ----

Result<int64_t> Store::UpsertCampaign(const std::string& name, const std::string& source_path,
                                      const std::string& source_text, int64_t now_ms) {
  if (name.empty()) {
    return Status::InvalidArgument(impl_->file() + ": table campaigns: empty campaign name");
  }
  int64_t id = 0;
  const Status st = impl_->Write("upserting campaign '" + name + "'", [&]() -> Status {
    Query q(*impl_->db,
            "INSERT INTO campaigns (name, source_path, source_text, created_ms, updated_ms)"
            " VALUES (?1, ?2, ?3, ?4, ?4)"
            " ON CONFLICT (name) DO UPDATE SET source_path = excluded.source_path,"
            " source_text = excluded.source_text, updated_ms = excluded.updated_ms"
            " RETURNING id",
            "upserting into table campaigns");
    q.Bind(1, name).Bind(2, source_path).Bind(3, source_text).Bind(4, now_ms);
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row)
      return Status::Internal(impl_->file() + ": upserting campaign '" + name +
                              "': no id returned");
    id = q.Int(0);
    return q.Run();
  });
  if (!st.ok()) return st;
  return id;
}

namespace {

constexpr const char* kCampaignColumns =
    "id, name, source_path, source_text, created_ms, updated_ms";

CampaignRecord ReadCampaign(const Query& q) {
  CampaignRecord c;
  c.id = q.Int(0);
  c.name = q.Text(1);
  c.source_path = q.Text(2);
  c.source_text = q.Text(3);
  c.created_ms = q.Int(4);
  c.updated_ms = q.Int(5);
  return c;
}

}  // namespace

Result<std::optional<CampaignRecord>> Store::FindCampaign(const std::string& name) {
  Query q(*impl_->db, std::string("SELECT ") + kCampaignColumns + " FROM campaigns WHERE name = ?",
          "looking up campaign '" + name + "' in table campaigns");
  q.Bind(1, name);
  NW_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::optional<CampaignRecord>();
  return std::optional<CampaignRecord>(ReadCampaign(q));
}

Result<std::vector<CampaignRecord>> Store::ListCampaigns() {
  Query q(*impl_->db, std::string("SELECT ") + kCampaignColumns + " FROM campaigns ORDER BY id",
          "listing table campaigns");
  std::vector<CampaignRecord> out;
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    out.push_back(ReadCampaign(q));
  }
  return out;
}

// ---- Jobs ----

Status Store::AddJobs(int64_t campaign_id, const std::vector<JobSpec>& jobs, int64_t now_ms) {
  return impl_->Write("adding jobs to campaign " + std::to_string(campaign_id),
                      [&] { return impl_->AddJobsLocked(campaign_id, jobs, now_ms); });
}

Status Store::SetCampaignJobs(int64_t campaign_id, const std::vector<JobSpec>& jobs,
                              int64_t now_ms) {
  return impl_->Write(
      "setting the jobs of campaign " + std::to_string(campaign_id), [&]() -> Status {
        NW_RETURN_IF_ERROR(impl_->AddJobsLocked(campaign_id, jobs, now_ms));
        std::set<std::string> keep;
        for (const JobSpec& s : jobs) keep.insert(s.Key());
        std::vector<std::string> linked;
        {
          Query q(*impl_->db, "SELECT job_key FROM campaign_jobs WHERE campaign_id = ?",
                  "reading table campaign_jobs");
          q.Bind(1, campaign_id);
          while (true) {
            NW_ASSIGN_OR_RETURN(bool row, q.Step());
            if (!row) break;
            linked.push_back(q.Text(0));
          }
        }
        for (const std::string& key : linked) {
          if (keep.count(key)) continue;
          Query q(*impl_->db, "DELETE FROM campaign_jobs WHERE campaign_id = ? AND job_key = ?",
                  "unlinking a job in table campaign_jobs");
          q.Bind(1, campaign_id).Bind(2, key);
          NW_RETURN_IF_ERROR(q.Run());
        }
        return Status::Ok();
      });
}

Result<std::vector<JobRecord>> Store::CampaignJobs(int64_t campaign_id) {
  NW_RETURN_IF_ERROR(impl_->CheckCampaign(campaign_id));
  Query q(*impl_->db,
          std::string("SELECT ") + kJobColumns +
              " FROM jobs j JOIN campaign_jobs cj ON cj.job_key = j.key"
              " WHERE cj.campaign_id = ? ORDER BY j.rowid",
          "reading the jobs of campaign " + std::to_string(campaign_id));
  q.Bind(1, campaign_id);
  return impl_->ReadJobs(q);
}

Result<std::vector<JobRecord>> Store::JobsInState(JobState state, int64_t limit) {
  Query q(*impl_->db,
          std::string("SELECT ") + kJobColumns +
              " FROM jobs j WHERE j.state = ? ORDER BY j.rowid LIMIT ?",
          "reading " + std::string(JobStateName(state)) + " jobs from table jobs");
  q.Bind(1, JobStateName(state)).Bind(2, limit);
  return impl_->ReadJobs(q);
}

Result<std::optional<JobRecord>> Store::FindJob(const std::string& key) {
  Query q(*impl_->db, std::string("SELECT ") + kJobColumns + " FROM jobs j WHERE j.key = ?",
          "looking up a job in table jobs");
  q.Bind(1, key);
  NW_ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, impl_->ReadJobs(q));
  if (jobs.empty()) return std::optional<JobRecord>();
  return std::optional<JobRecord>(std::move(jobs.front()));
}

Result<std::vector<std::string>> Store::DoneKeys(const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  for (const std::string& key : keys) {
    Query q(*impl_->db, "SELECT 1 FROM jobs WHERE key = ? AND state = 'done'",
            "looking up done jobs in table jobs");
    q.Bind(1, key);
    NW_ASSIGN_OR_RETURN(bool done, q.Step());
    if (done) out.push_back(key);
  }
  return out;
}

Status Store::RequeueJobs(const std::vector<std::string>& keys, int64_t now_ms) {
  return impl_->Write("requeueing jobs", [&]() -> Status {
    for (const std::string& key : keys) {
      NW_ASSIGN_OR_RETURN(auto state, impl_->JobStateOf(key, "requeueing a job"));
      if (state.first == JobState::kLeased) continue;
      Query q(*impl_->db, "UPDATE jobs SET state = 'queued', updated_ms = ? WHERE key = ?",
              "requeueing a job in table jobs");
      q.Bind(1, now_ms).Bind(2, key);
      NW_RETURN_IF_ERROR(q.Run());
    }
    return Status::Ok();
  });
}

Result<int64_t> Store::RequeueInfrastructureFailures(const std::vector<std::string>& keys,
                                                     int64_t now_ms) {
  int64_t n = 0;
  const Status st = impl_->Write("requeueing jobs failed by the infrastructure", [&]() -> Status {
    n = 0;  // the body may run again (SetBusyRetry)
    // The scheduler's own failures carry these codes; an engine's error (even with one of these
    // codes) says "engine error on worker ..." (coordinator/scheduler.cc).
    for (const std::string& key : keys) {
      Query q(*impl_->db,
              "UPDATE jobs SET state = 'queued', updated_ms = ?1 WHERE key = ?2 AND state = "
              "'failed' AND NOT EXISTS (SELECT 1 FROM attempts WHERE job_key = ?2 AND status = "
              "'failed' AND (error_code NOT IN ('deadline_exceeded', 'unavailable', 'cancelled')"
              " OR error_message LIKE 'engine error on worker %'))",
              "requeueing a job failed by the infrastructure in table jobs");
      q.Bind(1, now_ms).Bind(2, key);
      NW_RETURN_IF_ERROR(q.Run());
      n += q.Changes();
    }
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return n;
}

Result<int64_t> Store::RequeueLeased(int64_t now_ms) {
  int64_t n = 0;
  const Status st = impl_->Write("requeueing leased jobs", [&]() -> Status {
    {
      Query q(*impl_->db,
              "UPDATE attempts SET status = 'lost', ended_ms = ?, error_code = 'unavailable',"
              " error_message = 'the coordinator restarted while the attempt was running'"
              " WHERE status = 'running'",
              "closing running attempts as lost in table attempts");
      q.Bind(1, now_ms);
      NW_RETURN_IF_ERROR(q.Run());
    }
    Query q(*impl_->db, "UPDATE jobs SET state = 'queued', updated_ms = ? WHERE state = 'leased'",
            "requeueing leased jobs in table jobs");
    q.Bind(1, now_ms);
    NW_RETURN_IF_ERROR(q.Run());
    n = q.Changes();
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return n;
}

Status Store::RecordLease(const std::string& key, int attempt, const std::string& worker_id,
                          int64_t lease_expires_ms, int64_t now_ms) {
  return impl_->Write("recording a lease", [&]() -> Status {
    return impl_->LeaseLocked(LeaseRow{key, attempt, worker_id, lease_expires_ms}, now_ms);
  });
}

Status Store::RecordAttempts(const std::vector<FailureRow>& failures,
                             const std::vector<LeaseRow>& leases, int64_t now_ms) {
  if (failures.empty() && leases.empty()) return Status::Ok();
  for (const FailureRow& f : failures) {
    if (f.reason == nullptr || f.reason->ok()) {
      return Status::InvalidArgument(impl_->file() + ": recording failure of job " +
                                     std::string(f.job_key) + " attempt " +
                                     std::to_string(f.attempt) + ": the reason is OK");
    }
  }
  return impl_->Write("recording attempts", [&]() -> Status {
    for (const FailureRow& f : failures) {
      NW_RETURN_IF_ERROR(
          impl_->FailureLocked(f.job_key, f.attempt, *f.reason, f.will_retry, now_ms));
    }
    for (const LeaseRow& l : leases) NW_RETURN_IF_ERROR(impl_->LeaseLocked(l, now_ms));
    return Status::Ok();
  });
}

Result<std::vector<AttemptRecord>> Store::Attempts(const std::string& key) {
  Query q(*impl_->db,
          "SELECT job_key, attempt, worker_id, started_ms, lease_expires_ms, ended_ms, status,"
          " error_code, error_message FROM attempts WHERE job_key = ? ORDER BY attempt",
          "reading table attempts");
  q.Bind(1, key);
  std::vector<AttemptRecord> out;
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    AttemptRecord a;
    a.job_key = q.Text(0);
    a.attempt = static_cast<int>(q.Int(1));
    a.worker_id = q.Text(2);
    a.started_ms = q.Int(3);
    a.lease_expires_ms = q.Int(4);
    a.ended_ms = q.OptInt(5);
    a.status = q.Text(6);
    a.error_code = q.Text(7);
    a.error_message = q.Text(8);
    out.push_back(std::move(a));
  }
  return out;
}

Status Store::CommitResults(const std::vector<JobResult>& results, int64_t now_ms) {
  // Validate the whole batch before touching the database.
  for (const JobResult& r : results) {
    auto what = [&] {
      return impl_->file() + ": committing result for job " + r.job_key + " attempt " +
             std::to_string(r.attempt);
    };
    if (r.job_key.empty())
      return Status::InvalidArgument(impl_->file() + ": result without job key");
    if (r.attempt < 1) return Status::InvalidArgument(what() + ": attempts are numbered from 1");
    if (r.probes.empty()) continue;
    std::set<int> layers;
    for (const ProbeSummary& p : r.probes) {
      if (!layers.insert(p.layer).second) {
        return Status::InvalidArgument(what() + ": two probes for layer " +
                                       std::to_string(p.layer));
      }
    }
  }
  return impl_->Write("committing results", [&]() -> Status {
    for (const JobResult& r : results) {
      NW_RETURN_IF_ERROR(impl_->CommitOne(r, now_ms));
    }
    return Status::Ok();
  });
}

Status Store::RecordFailure(const std::string& key, int attempt, const Status& reason,
                            bool will_retry, int64_t now_ms) {
  if (reason.ok()) {
    return Status::InvalidArgument(impl_->file() + ": recording failure of job " + key +
                                   " attempt " + std::to_string(attempt) + ": the reason is OK");
  }
  return impl_->Write("recording a failure", [&]() -> Status {
    return impl_->FailureLocked(key, attempt, reason, will_retry, now_ms);
  });
}

// ---- Workers ----

Status Store::UpsertWorker(const WorkerRecord& w) {
  if (w.id.empty()) return Status::InvalidArgument(impl_->file() + ": table workers: empty id");
  const std::string state = w.state.empty() ? "active" : w.state;
  if (state != "active" && state != "lost" && state != "gone") {
    return Status::InvalidArgument(impl_->file() + ": table workers: worker '" + w.id +
                                   "': unknown state '" + state + "'");
  }
  return impl_->Write("upserting worker '" + w.id + "'", [&]() -> Status {
    Query q(*impl_->db,
            "INSERT INTO workers (id, host, device, capabilities_json, first_seen_ms,"
            " last_seen_ms, state) VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET host = excluded.host, device = excluded.device,"
            " capabilities_json = excluded.capabilities_json,"
            " last_seen_ms = excluded.last_seen_ms, state = excluded.state",
            "upserting into table workers");
    q.Bind(1, w.id)
        .Bind(2, w.host)
        .Bind(3, w.device)
        .Bind(4, w.capabilities.is_null() ? std::string("{}") : w.capabilities.dump())
        .Bind(5, w.first_seen_ms)
        .Bind(6, w.last_seen_ms)
        .Bind(7, state);
    NW_RETURN_IF_ERROR(q.Run());
    // Workers that left are history: only the newest kMaxInactiveWorkerRows are kept (checked
    // every kWorkerPruneEvery departures, so at most that many more), so peers registering ever
    // new ids cannot grow the table without bound (results and attempts keep their worker ids).
    if (state == "active" || ++impl_->departures % kWorkerPruneEvery != 0) return Status::Ok();
    Query prune(*impl_->db,
                "DELETE FROM workers WHERE state <> 'active' AND id NOT IN (SELECT id FROM"
                " workers WHERE state <> 'active' ORDER BY last_seen_ms DESC, id LIMIT ?)",
                "pruning table workers");
    prune.Bind(1, kMaxInactiveWorkerRows);
    return prune.Run();
  });
}

Result<std::vector<WorkerRecord>> Store::ListWorkers() {
  Query q(*impl_->db,
          "SELECT id, host, device, capabilities_json, first_seen_ms, last_seen_ms, state"
          " FROM workers ORDER BY id",
          "listing table workers");
  std::vector<WorkerRecord> out;
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    WorkerRecord w;
    w.id = q.Text(0);
    w.host = q.Text(1);
    w.device = q.Text(2);
    try {
      w.capabilities = json::parse(q.Text(3));
    } catch (const json::exception& e) {
      return Status::Corruption(impl_->file() + ": table workers, id " + w.id +
                                ": capabilities_json is not JSON (" + e.what() + ")");
    }
    w.first_seen_ms = q.Int(4);
    w.last_seen_ms = q.Int(5);
    w.state = q.Text(6);
    out.push_back(std::move(w));
  }
  return out;
}

// ---- Reading ----

Result<CampaignProgress> Store::Progress(int64_t campaign_id) {
  NW_RETURN_IF_ERROR(impl_->CheckCampaign(campaign_id));
  CampaignProgress p;
  {
    Query q(*impl_->db,
            "SELECT COUNT(*), SUM(j.state = 'queued'), SUM(j.state = 'leased'),"
            " SUM(j.state = 'done'), SUM(j.state = 'failed')"
            " FROM jobs j JOIN campaign_jobs cj ON cj.job_key = j.key WHERE cj.campaign_id = ?",
            "counting the jobs of campaign " + std::to_string(campaign_id));
    q.Bind(1, campaign_id);
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (row) {
      p.total = q.Int(0);
      p.queued = q.Int(1);
      p.leased = q.Int(2);
      p.done = q.Int(3);
      p.failed = q.Int(4);
    }
  }
  Query q(*impl_->db,
          "SELECT outcome, COUNT(*) FROM v_campaign_jobs"
          " WHERE campaign_id = ? AND state = 'done' AND outcome IS NOT NULL GROUP BY outcome",
          "counting the outcomes of campaign " + std::to_string(campaign_id));
  q.Bind(1, campaign_id);
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    const std::string outcome = q.Text(0);
    if (outcome == "pass") {
      p.pass += q.Int(1);
    } else if (outcome == "miss") {
      p.miss += q.Int(1);
    } else {
      p.other += q.Int(1);
    }
  }
  return p;
}

Result<std::vector<HeatmapCell>> Store::Heatmap(int64_t campaign_id) {
  NW_RETURN_IF_ERROR(impl_->CheckCampaign(campaign_id));
  Query q(*impl_->db,
          "SELECT config, context_length, needle_position, trials, passes, errors, pending,"
          " failed FROM v_heatmap WHERE campaign_id = ?"
          " ORDER BY config, context_length, needle_position",
          "reading view v_heatmap for campaign " + std::to_string(campaign_id));
  q.Bind(1, campaign_id);
  std::vector<HeatmapCell> out;
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    HeatmapCell c;
    c.config = q.Text(0);
    c.context_length = q.Int(1);
    c.needle_position = q.Real(2);
    c.trials = q.Int(3);
    c.passes = q.Int(4);
    c.errors = q.Int(5);
    c.pending = q.Int(6);
    c.failed = q.Int(7);
    out.push_back(std::move(c));
  }
  return out;
}

Result<std::vector<BoundaryRow>> Store::Boundaries(int64_t campaign_id) {
  NW_RETURN_IF_ERROR(impl_->CheckCampaign(campaign_id));
  Query q(*impl_->db,
          "SELECT config, lengths, min_length, max_length, l_pass, l_fail, first_unclean,"
          " max_clean, monotone, fail_trials, fail_passes, trials, passes, errors, pending,"
          " failed FROM v_boundary WHERE campaign_id = ? ORDER BY config",
          "reading view v_boundary for campaign " + std::to_string(campaign_id));
  q.Bind(1, campaign_id);
  std::vector<BoundaryRow> out;
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    BoundaryRow b;
    b.config = q.Text(0);
    b.lengths = q.Int(1);
    b.min_length = q.Int(2);
    b.max_length = q.Int(3);
    b.l_pass = q.OptInt(4);
    b.l_fail = q.OptInt(5);
    b.first_unclean = q.OptInt(6);
    b.max_clean = q.OptInt(7);
    b.monotone = q.Int(8) != 0;
    b.fail_trials = q.Int(9);
    b.fail_passes = q.Int(10);
    b.trials = q.Int(11);
    b.passes = q.Int(12);
    b.errors = q.Int(13);
    b.pending = q.Int(14);
    b.failed = q.Int(15);
    out.push_back(std::move(b));
  }
  return out;
}

Result<std::vector<OutcomeCount>> Store::OutcomeCounts(int64_t campaign_id) {
  NW_RETURN_IF_ERROR(impl_->CheckCampaign(campaign_id));
  Query q(*impl_->db,
          "SELECT config, outcome, COUNT(*) FROM v_campaign_jobs"
          " WHERE campaign_id = ? AND outcome IS NOT NULL GROUP BY config, outcome"
          " ORDER BY config, outcome",
          "counting outcomes per configuration for campaign " + std::to_string(campaign_id));
  q.Bind(1, campaign_id);
  std::vector<OutcomeCount> out;
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    OutcomeCount c;
    c.config = q.Text(0);
    auto outcome = ParseOutcome(q.Text(1));
    if (!outcome.ok()) {
      return Status::Corruption(impl_->file() + ": table results: " + outcome.status().message());
    }
    c.outcome = *outcome;
    c.count = q.Int(2);
    out.push_back(std::move(c));
  }
  return out;
}

Result<std::vector<FailureReason>> Store::FailureReasons(int64_t campaign_id) {
  NW_RETURN_IF_ERROR(impl_->CheckCampaign(campaign_id));
  Query q(*impl_->db,
          "SELECT config, kind, reason, COUNT(*) AS n FROM v_job_failures WHERE campaign_id = ?"
          " GROUP BY config, kind, reason ORDER BY config, n DESC, kind, reason",
          "reading view v_job_failures for campaign " + std::to_string(campaign_id));
  q.Bind(1, campaign_id);
  std::vector<FailureReason> out;
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    FailureReason f;
    f.config = q.Text(0);
    f.kind = q.Text(1);
    f.reason = q.Text(2);
    f.jobs = q.Int(3);
    out.push_back(std::move(f));
  }
  return out;
}

Result<std::vector<BackendTiming>> Store::TimingHistory() {
  Query q(*impl_->db,
          "SELECT backend, SUM(total_ms) / SUM(prompt_tokens), COUNT(*) FROM v_results"
          " WHERE outcome IN ('pass', 'miss') AND prompt_tokens > 0 GROUP BY backend"
          " ORDER BY backend",
          "reading job timings per backend");
  std::vector<BackendTiming> out;
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    BackendTiming t;
    t.backend = q.Text(0);
    t.ms_per_token = q.Real(1);
    t.jobs = q.Int(2);
    out.push_back(std::move(t));
  }
  return out;
}

Result<std::vector<LayerProbeStats>> Store::ProbeStats(int64_t campaign_id) {
  NW_RETURN_IF_ERROR(impl_->CheckCampaign(campaign_id));
  Query q(*impl_->db,
          "SELECT config, layer, answers, passes, in_topk_last, pass_in_topk_last, visible,"
          " median_rank, mean_in_topk_fraction, best_rank"
          " FROM v_probe_summary WHERE campaign_id = ? ORDER BY config, layer",
          "reading view v_probe_summary for campaign " + std::to_string(campaign_id));
  q.Bind(1, campaign_id);
  std::vector<LayerProbeStats> out;
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    LayerProbeStats s;
    s.config = q.Text(0);
    s.layer = static_cast<int>(q.Int(1));
    s.answers = q.Int(2);
    s.passes = q.Int(3);
    s.in_topk_last = q.Int(4);
    s.pass_in_topk_last = q.Int(5);
    s.visible = q.Int(6);
    s.median_rank = q.OptReal(7);
    s.mean_in_topk_fraction = q.Real(8);
    s.best_rank = q.OptInt(9);
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::vector<JobResult>> Store::Results(int64_t campaign_id) {
  NW_RETURN_IF_ERROR(impl_->CheckCampaign(campaign_id));
  Query q(*impl_->db,
          "SELECT r.id, r.job_key, r.attempt, r.outcome, r.generated_text, r.expected,"
          " r.needle_token_offset, r.prompt_hash, r.prompt_tokens, r.generated_tokens,"
          " r.prefill_ms, r.decode_ms, r.total_ms, r.worker_id, r.device, r.engine_version,"
          " r.error_code, r.error_message, r.retryable, r.ttft_ms, r.tpot_ms, r.itl_p50_ms,"
          " r.itl_p95_ms, r.stream_events"
          " FROM v_campaign_jobs c JOIN results r ON r.id = c.result_id"
          " WHERE c.campaign_id = ? ORDER BY c.job_key",
          "reading the results of campaign " + std::to_string(campaign_id));
  q.Bind(1, campaign_id);
  std::vector<JobResult> out;
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    const int64_t result_id = q.Int(0);
    JobResult r;
    r.job_key = q.Text(1);
    r.attempt = static_cast<int>(q.Int(2));
    auto outcome = ParseOutcome(q.Text(3));
    if (!outcome.ok()) {
      return Status::Corruption(impl_->file() + ": table results, job " + r.job_key + ": " +
                                outcome.status().message());
    }
    r.outcome = *outcome;
    r.generated_text = q.Text(4);
    r.expected = q.Text(5);
    r.needle_token_offset = q.Int(6);
    r.prompt_hash = q.Text(7);
    r.prompt_tokens = q.Int(8);
    r.generated_tokens = q.Int(9);
    r.prefill_ms = q.Real(10);
    r.decode_ms = q.Real(11);
    r.total_ms = q.Real(12);
    r.worker_id = q.Text(13);
    r.device = q.Text(14);
    r.engine_version = q.Text(15);
    r.error_code = q.Text(16);
    r.error_message = q.Text(17);
    r.retryable = q.Int(18) != 0;
    r.stream = ReadStreamTiming(q, 19);
    Query pq(*impl_->db,
             "SELECT layer, positions, needle_rank_min, needle_rank_median, in_topk_fraction,"
             " in_topk_last, topk, ranks_json, topk_last_json FROM probes WHERE result_id = ?"
             " ORDER BY layer",
             "reading table probes");
    pq.Bind(1, result_id);
    while (true) {
      NW_ASSIGN_OR_RETURN(bool prow, pq.Step());
      if (!prow) break;
      ProbeSummary p;
      p.layer = static_cast<int>(pq.Int(0));
      p.positions = static_cast<int>(pq.Int(1));
      p.needle_rank_min = static_cast<int>(pq.Int(2));
      p.needle_rank_median = pq.Real(3);
      p.in_topk_fraction = pq.Real(4);
      p.in_topk_last = pq.Int(5) != 0;
      p.topk = static_cast<int>(pq.Int(6));
      const std::string where =
          "table probes, job " + r.job_key + " layer " + std::to_string(p.layer);
      NW_ASSIGN_OR_RETURN(p.ranks, ParseIntArray(*impl_->db, pq.Text(7), where + ", ranks_json"));
      NW_ASSIGN_OR_RETURN(p.topk_last,
                          ParseIntArray(*impl_->db, pq.Text(8), where + ", topk_last_json"));
      r.probes.push_back(std::move(p));
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace nw

// ---- Samples, baselines and flaky verdicts (nw export, nw baseline, nw gate) ----

namespace nw {
namespace {

// The result columns read by ReadResultAt, prefixed "r.".
constexpr const char* kResultColumns =
    "r.id, r.job_key, r.attempt, r.outcome, r.generated_text, r.expected, r.needle_token_offset,"
    " r.prompt_hash, r.prompt_tokens, r.generated_tokens, r.prefill_ms, r.decode_ms, r.total_ms,"
    " r.worker_id, r.device, r.engine_version, r.error_code, r.error_message, r.retryable,"
    " r.created_ms, r.ttft_ms, r.tpot_ms, r.itl_p50_ms, r.itl_p95_ms, r.stream_events";

// Reads kResultColumns starting at column `first`: (results.id, result, created_ms).
Result<std::pair<int64_t, JobResult>> ReadResultAt(const Db& db, const Query& q, int first,
                                                   int64_t* created_ms) {
  JobResult r;
  const int64_t id = q.Int(first);
  r.job_key = q.Text(first + 1);
  r.attempt = static_cast<int>(q.Int(first + 2));
  auto outcome = ParseOutcome(q.Text(first + 3));
  if (!outcome.ok()) {
    return Status::Corruption(db.file() + ": table results, id " + std::to_string(id) + ": " +
                              outcome.status().message());
  }
  r.outcome = *outcome;
  r.generated_text = q.Text(first + 4);
  r.expected = q.Text(first + 5);
  r.needle_token_offset = q.Int(first + 6);
  r.prompt_hash = q.Text(first + 7);
  r.prompt_tokens = q.Int(first + 8);
  r.generated_tokens = q.Int(first + 9);
  r.prefill_ms = q.Real(first + 10);
  r.decode_ms = q.Real(first + 11);
  r.total_ms = q.Real(first + 12);
  r.worker_id = q.Text(first + 13);
  r.device = q.Text(first + 14);
  r.engine_version = q.Text(first + 15);
  r.error_code = q.Text(first + 16);
  r.error_message = q.Text(first + 17);
  r.retryable = q.Int(first + 18) != 0;
  if (created_ms != nullptr) *created_ms = q.Int(first + 19);
  r.stream = ReadStreamTiming(q, first + 20);
  return std::make_pair(id, std::move(r));
}

Status ReadProbesInto(Db& db, int64_t result_id, JobResult& r) {
  Query pq(db,
           "SELECT layer, positions, needle_rank_min, needle_rank_median, in_topk_fraction,"
           " in_topk_last, topk, ranks_json, topk_last_json FROM probes WHERE result_id = ?"
           " ORDER BY layer",
           "reading table probes");
  pq.Bind(1, result_id);
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, pq.Step());
    if (!row) break;
    ProbeSummary p;
    p.layer = static_cast<int>(pq.Int(0));
    p.positions = static_cast<int>(pq.Int(1));
    p.needle_rank_min = static_cast<int>(pq.Int(2));
    p.needle_rank_median = pq.Real(3);
    p.in_topk_fraction = pq.Real(4);
    p.in_topk_last = pq.Int(5) != 0;
    p.topk = static_cast<int>(pq.Int(6));
    const std::string where =
        "table probes, job " + r.job_key + " layer " + std::to_string(p.layer);
    NW_ASSIGN_OR_RETURN(p.ranks, ParseIntArray(db, pq.Text(7), where + ", ranks_json"));
    NW_ASSIGN_OR_RETURN(p.topk_last, ParseIntArray(db, pq.Text(8), where + ", topk_last_json"));
    r.probes.push_back(std::move(p));
  }
  return Status::Ok();
}

// Rows of: kJobColumns (5), config, kResultColumns (NULLs without a result).
Result<std::vector<CampaignSample>> ReadSamples(Db& db, Query& q, bool with_probes) {
  std::vector<CampaignSample> out;
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    CampaignSample s;
    NW_ASSIGN_OR_RETURN(s.job, ReadJob(db, q));
    s.config = q.Text(5);
    if (!q.IsNull(6)) {
      NW_ASSIGN_OR_RETURN(auto r, ReadResultAt(db, q, 6, &s.result_created_ms));
      s.result_id = r.first;
      s.result = std::move(r.second);
    }
    out.push_back(std::move(s));
  }
  if (with_probes) {
    for (CampaignSample& s : out) {
      if (s.result) NW_RETURN_IF_ERROR(ReadProbesInto(db, s.result_id, *s.result));
    }
  }
  return out;
}

constexpr const char* kBaselineSelect =
    "SELECT b.name, b.campaign_id, c.name, b.note, b.created_ms, b.updated_ms,"
    " (SELECT COUNT(*) FROM baseline_results br WHERE br.baseline = b.name),"
    " (SELECT COUNT(*) FROM baseline_results br WHERE br.baseline = b.name"
    "  AND br.result_id IS NOT NULL)"
    " FROM baselines b JOIN campaigns c ON c.id = b.campaign_id";

BaselineRecord ReadBaseline(const Query& q) {
  BaselineRecord b;
  b.name = q.Text(0);
  b.campaign_id = q.Int(1);
  b.campaign_name = q.Text(2);
  b.note = q.Text(3);
  b.created_ms = q.Int(4);
  b.updated_ms = q.Int(5);
  b.jobs = q.Int(6);
  b.results = q.Int(7);
  return b;
}

bool IsVerdictName(const std::string& v) {
  return v == "flaky" || v == "stable_pass" || v == "stable_miss" || v == "no_answer";
}

}  // namespace

Result<std::vector<CampaignSample>> Store::CampaignSamples(int64_t campaign_id, bool with_probes) {
  NW_RETURN_IF_ERROR(impl_->CheckCampaign(campaign_id));
  Query q(*impl_->db,
          std::string("SELECT ") + kJobColumns + ", c.config, " + kResultColumns +
              " FROM v_campaign_jobs c JOIN jobs j ON j.key = c.job_key"
              " LEFT JOIN results r ON r.id = c.result_id"
              " WHERE c.campaign_id = ? ORDER BY j.rowid",
          "reading the jobs and results of campaign " + std::to_string(campaign_id));
  q.Bind(1, campaign_id);
  return ReadSamples(*impl_->db, q, with_probes);
}

Result<std::vector<std::pair<int64_t, JobResult>>> Store::ResultHistory(const std::string& key) {
  Query q(
      *impl_->db,
      std::string("SELECT ") + kResultColumns + " FROM results r WHERE r.job_key = ? ORDER BY r.id",
      "reading the results of job " + key);
  q.Bind(1, key);
  std::vector<std::pair<int64_t, JobResult>> out;
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    NW_ASSIGN_OR_RETURN(auto r, ReadResultAt(*impl_->db, q, 0, nullptr));
    out.push_back(std::move(r));
  }
  return out;
}

Result<BaselineRecord> Store::SetBaseline(const std::string& name, int64_t campaign_id,
                                          const std::string& note, int64_t now_ms, bool replace) {
  if (name.empty()) {
    return Status::InvalidArgument(impl_->file() + ": table baselines: empty baseline name");
  }
  std::optional<BaselineRecord> out;
  const Status st = impl_->Write("setting baseline '" + name + "'", [&]() -> Status {
    NW_RETURN_IF_ERROR(impl_->CheckCampaign(campaign_id));
    {
      Query q(*impl_->db, "SELECT 1 FROM campaigns WHERE name = ?",
              "looking for a campaign named like the baseline");
      q.Bind(1, name);
      NW_ASSIGN_OR_RETURN(bool clash, q.Step());
      if (clash) {
        return Status::FailedPrecondition(
            impl_->file() + ": '" + name +
            "' is a campaign's name; a baseline of that name would shadow the campaign in nw "
            "gate, so give the baseline another name");
      }
    }
    if (!replace) {
      Query q(*impl_->db, "SELECT 1 FROM baselines WHERE name = ?", "looking for the baseline");
      q.Bind(1, name);
      NW_ASSIGN_OR_RETURN(bool exists, q.Step());
      if (exists) {
        return Status::AlreadyExists(impl_->file() + ": baseline '" + name +
                                     "' exists; replacing it needs --replace");
      }
    }
    {
      Query q(*impl_->db,
              "INSERT INTO baselines (name, campaign_id, note, created_ms, updated_ms)"
              " VALUES (?1, ?2, ?3, ?4, ?4)"
              " ON CONFLICT (name) DO UPDATE SET campaign_id = excluded.campaign_id,"
              " note = excluded.note, updated_ms = excluded.updated_ms",
              "upserting into table baselines");
      q.Bind(1, name).Bind(2, campaign_id).Bind(3, note).Bind(4, now_ms);
      NW_RETURN_IF_ERROR(q.Run());
    }
    {
      Query q(*impl_->db, "DELETE FROM baseline_results WHERE baseline = ?",
              "clearing table baseline_results");
      q.Bind(1, name);
      NW_RETURN_IF_ERROR(q.Run());
    }
    {
      Query q(*impl_->db,
              "INSERT INTO baseline_results (baseline, job_key, result_id)"
              " SELECT ?1, job_key, result_id FROM v_campaign_jobs WHERE campaign_id = ?2",
              "freezing results into table baseline_results");
      q.Bind(1, name).Bind(2, campaign_id);
      NW_RETURN_IF_ERROR(q.Run());
    }
    Query q(*impl_->db, std::string(kBaselineSelect) + " WHERE b.name = ?",
            "reading back baseline '" + name + "'");
    q.Bind(1, name);
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return Status::Internal(impl_->file() + ": baseline '" + name + "' vanished");
    out = ReadBaseline(q);
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return *out;
}

Result<std::optional<BaselineRecord>> Store::FindBaseline(const std::string& name) {
  Query q(*impl_->db, std::string(kBaselineSelect) + " WHERE b.name = ?",
          "looking up baseline '" + name + "' in table baselines");
  q.Bind(1, name);
  NW_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::optional<BaselineRecord>();
  return std::optional<BaselineRecord>(ReadBaseline(q));
}

Result<std::vector<BaselineRecord>> Store::ListBaselines() {
  Query q(*impl_->db, std::string(kBaselineSelect) + " ORDER BY b.name", "listing table baselines");
  std::vector<BaselineRecord> out;
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    out.push_back(ReadBaseline(q));
  }
  return out;
}

Status Store::DeleteBaseline(const std::string& name) {
  return impl_->Write("deleting baseline '" + name + "'", [&]() -> Status {
    Query q(*impl_->db, "DELETE FROM baselines WHERE name = ?", "deleting from table baselines");
    q.Bind(1, name);
    NW_RETURN_IF_ERROR(q.Run());
    if (q.Changes() == 0) {
      return Status::NotFound(impl_->file() + ": no baseline named '" + name +
                              "' in table baselines");
    }
    return Status::Ok();
  });
}

Result<std::vector<CampaignSample>> Store::BaselineSamples(const std::string& name,
                                                           bool with_probes) {
  NW_ASSIGN_OR_RETURN(std::optional<BaselineRecord> b, FindBaseline(name));
  if (!b) {
    return Status::NotFound(impl_->file() + ": no baseline named '" + name +
                            "' in table baselines");
  }
  Query q(*impl_->db,
          std::string("SELECT ") + kJobColumns + ", v.config, " + kResultColumns +
              " FROM baseline_results br JOIN jobs j ON j.key = br.job_key"
              " JOIN v_job_config v ON v.key = br.job_key"
              " LEFT JOIN results r ON r.id = br.result_id"
              " WHERE br.baseline = ? ORDER BY j.rowid",
          "reading the frozen results of baseline '" + name + "'");
  q.Bind(1, name);
  return ReadSamples(*impl_->db, q, with_probes);
}

Status Store::RecordFlakyVerdicts(const std::vector<FlakyVerdict>& verdicts) {
  for (const FlakyVerdict& v : verdicts) {
    if (!IsVerdictName(v.verdict)) {
      return Status::InvalidArgument(impl_->file() + ": table flaky_verdicts: job " + v.job_key +
                                     ": unknown verdict '" + v.verdict + "'");
    }
  }
  return impl_->Write("recording flaky verdicts", [&]() -> Status {
    for (const FlakyVerdict& v : verdicts) {
      NW_RETURN_IF_ERROR(impl_->JobStateOf(v.job_key, "recording a flaky verdict").status());
      Query q(*impl_->db,
              "INSERT INTO flaky_verdicts (job_key, gate, runs, passes, misses, errors, verdict,"
              " result_ids, decided_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
              "inserting into table flaky_verdicts");
      q.Bind(1, v.job_key)
          .Bind(2, v.gate)
          .Bind(3, v.runs)
          .Bind(4, v.passes)
          .Bind(5, v.misses)
          .Bind(6, v.errors)
          .Bind(7, v.verdict)
          .Bind(8, json(v.result_ids).dump())
          .Bind(9, v.decided_ms);
      NW_RETURN_IF_ERROR(q.Run());
    }
    return Status::Ok();
  });
}

Result<std::vector<FlakyVerdict>> Store::FlakyVerdicts(const std::string& key) {
  Query q(*impl_->db,
          "SELECT job_key, gate, runs, passes, misses, errors, verdict, result_ids, decided_ms"
          " FROM flaky_verdicts WHERE job_key = ? ORDER BY id",
          "reading table flaky_verdicts");
  q.Bind(1, key);
  std::vector<FlakyVerdict> out;
  while (true) {
    NW_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    FlakyVerdict v;
    v.job_key = q.Text(0);
    v.gate = q.Text(1);
    v.runs = q.Int(2);
    v.passes = q.Int(3);
    v.misses = q.Int(4);
    v.errors = q.Int(5);
    v.verdict = q.Text(6);
    try {
      v.result_ids = json::parse(q.Text(7)).get<std::vector<int64_t>>();
    } catch (const json::exception& e) {
      return Status::Corruption(impl_->file() + ": table flaky_verdicts, job " + v.job_key +
                                ": result_ids is not a JSON array of integers (" + e.what() + ")");
    }
    v.decided_ms = q.Int(8);
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace nw
