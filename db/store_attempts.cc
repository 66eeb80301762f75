// Store: the scheduler's write path (leases, failed attempts, committed results) and the
// attempts table.
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "db/rows.h"
#include "db/sqlite.h"
#include "db/store.h"
#include "db/store_impl.h"

namespace nw {

using db_internal::Columns;
using db_internal::Query;
using db_internal::ReadRows;
using json = nlohmann::json;

namespace {

bool IsErrorOutcome(Outcome o) { return o == Outcome::kEngineError || o == Outcome::kTimeout; }

}  // namespace

// One lease (RecordLease / RecordAttempts), inside a transaction. The success path is two
// statements: an UPDATE that only matches a job that may take this attempt, and the INSERT.
Status Store::Impl::LeaseLocked(const LeaseRow& l, int64_t now_ms) {
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
Status Store::Impl::LeaseRefusal(const LeaseRow& l) {
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
Status Store::Impl::FailureLocked(std::string_view key, int attempt, const Status& reason,
                                  bool will_retry, int64_t now_ms) {
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

// A result that was not inserted: an unknown job (NotFound), a job already done (first result
// wins: its attempt, if still open, is superseded), or the same attempt's result delivered
// twice (e.g. after --rerun requeued the job; nothing changes).
Status Store::Impl::NotCommitted(const JobResult& r, int64_t now_ms) {
  NW_ASSIGN_OR_RETURN(auto state, JobStateOf(r.job_key, "committing a result"));
  if (state.first != JobState::kDone) return Status::Ok();
  Query q(*db,
          "UPDATE attempts SET status = 'stale', ended_ms = ?"
          " WHERE job_key = ? AND attempt = ? AND status = 'running'",
          "closing a superseded attempt in table attempts");
  q.Bind(1, now_ms).Bind(2, r.job_key).Bind(3, r.attempt);
  return q.Run();
}

Status Store::Impl::CommitOne(const JobResult& r, int64_t now_ms) {
  {
    // The success path in one statement: stored only if the job exists and is not done, and
    // only once per (job, attempt) (the conflict on UNIQUE (job_key, attempt) inserts nothing).
    Query q(*db,
            "INSERT INTO results (job_key, attempt, outcome, generated_text, expected,"
            " needle_token_offset, prompt_hash, prompt_tokens, generated_tokens, prefill_ms,"
            " decode_ms, total_ms, worker_id, device, engine_version, error_code, error_message,"
            " retryable, created_ms, ttft_ms, tpot_ms, itl_p50_ms, itl_p95_ms, stream_events,"
            " gpu_busy)"
            " SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,"
            " ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25"
            " WHERE EXISTS (SELECT 1 FROM jobs WHERE key = ?1 AND state <> 'done')"
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
    if (r.gpu_busy) {
      q.Bind(25, *r.gpu_busy);
    } else {
      q.BindNull(25);
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
      q.Bind(3, std::string(OutcomeName(r.outcome)) + ": " + r.error_code + ": " + r.error_message);
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
  return ReadRows(q, [](const Query& r) {
    AttemptRecord a;
    Columns(r).Into(a.job_key, a.attempt, a.worker_id, a.started_ms, a.lease_expires_ms, a.ended_ms,
                    a.status, a.error_code, a.error_message);
    return a;
  });
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

}  // namespace nw
