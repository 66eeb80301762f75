// Store: campaigns and their jobs (adding, listing, requeueing).
#include <nlohmann/json.hpp>
#include <optional>
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
using db_internal::Db;
using db_internal::kJobColumns;
using db_internal::Query;
using db_internal::ReadJob;
using db_internal::ReadOptionalRow;
using db_internal::ReadRows;

Status Store::Impl::CheckCampaign(int64_t campaign_id) {
  Query q(*db, "SELECT 1 FROM campaigns WHERE id = ?", "looking up a campaign");
  q.Bind(1, campaign_id);
  NW_ASSIGN_OR_RETURN(bool found, q.Step());
  if (!found) {
    return Status::NotFound(file() + ": campaign id " + std::to_string(campaign_id) +
                            " is not in table campaigns");
  }
  return Status::Ok();
}

Result<std::pair<JobState, int>> Store::Impl::JobStateOf(std::string_view key,
                                                         const char* purpose) {
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

Status Store::Impl::AddJobsLocked(int64_t campaign_id, const std::vector<JobSpec>& jobs,
                                  int64_t now_ms) {
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

// ReadJob as a row mapper (db/rows.h).
auto ReadJobRow(const Db& db) {
  return [&db](const Query& q) { return ReadJob(db, q); };
}

CampaignRecord ReadCampaign(const Query& q) {
  CampaignRecord c;
  Columns(q).Into(c.id, c.name, c.source_path, c.source_text, c.created_ms, c.updated_ms);
  return c;
}

}  // namespace

Result<std::optional<CampaignRecord>> Store::FindCampaign(const std::string& name) {
  Query q(*impl_->db, std::string("SELECT ") + kCampaignColumns + " FROM campaigns WHERE name = ?",
          "looking up campaign '" + name + "' in table campaigns");
  q.Bind(1, name);
  return ReadOptionalRow(q, ReadCampaign);
}

Result<std::vector<CampaignRecord>> Store::ListCampaigns() {
  Query q(*impl_->db, std::string("SELECT ") + kCampaignColumns + " FROM campaigns ORDER BY id",
          "listing table campaigns");
  return ReadRows(q, ReadCampaign);
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
          NW_ASSIGN_OR_RETURN(linked, ReadRows(q, [](const Query& r) { return r.Text(0); }));
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
  return ReadRows(q, ReadJobRow(*impl_->db));
}

Result<std::vector<JobRecord>> Store::JobsInState(JobState state, int64_t limit) {
  Query q(*impl_->db,
          std::string("SELECT ") + kJobColumns +
              " FROM jobs j WHERE j.state = ? ORDER BY j.rowid LIMIT ?",
          "reading " + std::string(JobStateName(state)) + " jobs from table jobs");
  q.Bind(1, JobStateName(state)).Bind(2, limit);
  return ReadRows(q, ReadJobRow(*impl_->db));
}

Result<std::optional<JobRecord>> Store::FindJob(const std::string& key) {
  Query q(*impl_->db, std::string("SELECT ") + kJobColumns + " FROM jobs j WHERE j.key = ?",
          "looking up a job in table jobs");
  q.Bind(1, key);
  return ReadOptionalRow(q, ReadJobRow(*impl_->db));
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

}  // namespace nw
