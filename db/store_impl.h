// Store's implementation state and the pieces its files share, internal to nw_db: the
// connection, the write-transaction helper (with the busy retry), the job-state checks of the
// write path, and the row readers of jobs, results and probes. The Store's methods live in files
// by the job they do: store.cc (opening, transactions), store_jobs.cc (campaigns and jobs),
// store_attempts.cc (leases, failures, results: the scheduler's write path), store_workers.cc,
// store_views.cc (report views), store_samples.cc (results and samples), store_baselines.cc
// (baselines and flaky verdicts).
// Thread-safety: as Store (one owning thread).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "db/campaign_control.h"
#include "db/checkpointer.h"
#include "db/sqlite.h"
#include "db/store.h"

namespace nw {

struct Store::Impl {
  std::filesystem::path path;
  Mode mode = Mode::kReadWrite;
  std::unique_ptr<db_internal::Db> db;
  // Read-write file stores: WAL checkpoints off the writer's thread (db/checkpointer.h).
  // Declared after db: stopped before the connection closes.
  std::unique_ptr<db_internal::WalCheckpointer> checkpointer;
  BusyRetry busy_retry;
  int64_t departures = 0;  // workers recorded lost or gone (UpsertWorker's pruning)

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
    db_internal::Txn txn(*db);
    NW_RETURN_IF_ERROR(txn.Begin(purpose));
    NW_RETURN_IF_ERROR(body());
    return txn.Commit();
  }

  // NotFound naming the id when the campaign is not in table campaigns (store_jobs.cc).
  Status CheckCampaign(int64_t campaign_id);
  // The job's state and attempts, or NotFound naming the key (store_jobs.cc).
  Result<std::pair<JobState, int>> JobStateOf(std::string_view key, const char* purpose);
  // Inserts the jobs that are new and links all of them to the campaign (store_jobs.cc).
  Status AddJobsLocked(int64_t campaign_id, const std::vector<JobSpec>& jobs, int64_t now_ms);

  // The scheduler's write path, inside a transaction (store_attempts.cc).
  Status LeaseLocked(const LeaseRow& l, int64_t now_ms);
  Status LeaseRefusal(const LeaseRow& l);
  Status FailureLocked(std::string_view key, int attempt, const Status& reason, bool will_retry,
                       int64_t now_ms);
  Status CommitOne(const JobResult& r, int64_t now_ms);
  Status NotCommitted(const JobResult& r, int64_t now_ms);
};

namespace db_internal {

// Columns of jobs read into a JobRecord by ReadJob, in this order (table alias "j").
inline constexpr const char* kJobColumns = "j.key, j.spec_json, j.state, j.attempts, j.last_error";
// The result columns read by ReadResultAt, in this order (table alias "r").
inline constexpr const char* kResultColumns =
    "r.id, r.job_key, r.attempt, r.outcome, r.generated_text, r.expected, r.needle_token_offset,"
    " r.prompt_hash, r.prompt_tokens, r.generated_tokens, r.prefill_ms, r.decode_ms, r.total_ms,"
    " r.worker_id, r.device, r.engine_version, r.error_code, r.error_message, r.retryable,"
    " r.created_ms, r.ttft_ms, r.tpot_ms, r.itl_p50_ms, r.itl_p95_ms, r.stream_events,"
    " r.gpu_busy";

// kJobColumns of the current row, from column 0 (Corruption naming the file and key).
Result<JobRecord> ReadJob(const Db& db, const Query& q);
// kResultColumns from column `first`: (results.id, result); created_ms if asked for.
Result<std::pair<int64_t, JobResult>> ReadResultAt(const Db& db, const Query& q, int first,
                                                   int64_t* created_ms);
// Appends the probes of results.id `result_id` to r.probes, by layer.
Status ReadProbesInto(Db& db, int64_t result_id, JobResult& r);
// A JSON array of integers stored in a text column (Corruption naming `what`).
Result<std::vector<int32_t>> ParseIntArray(const Db& db, const std::string& text,
                                           const std::string& what);
// Rows of: kJobColumns, config, kResultColumns (NULLs without a result); probes when asked.
Result<std::vector<CampaignSample>> ReadSamples(Db& db, Query& q, bool with_probes);
// Every row of coordinator_campaigns, by campaign id (Corruption naming the file and campaign
// for an unknown state); shared by CampaignTable and the Store's read-only view
// (campaign_table.cc).
Result<std::vector<CampaignControl>> ReadCampaignControls(Db& db);

}  // namespace db_internal
}  // namespace nw
