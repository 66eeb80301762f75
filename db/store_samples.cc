// Store: reading jobs, results and probes back (the row readers shared by the Store's files) and
// the per-campaign results and samples that reports and exports read.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "db/rows.h"
#include "db/sqlite.h"
#include "db/store.h"
#include "db/store_impl.h"

namespace nw {
namespace db_internal {

using json = nlohmann::json;

Result<JobRecord> ReadJob(const Db& db, const Query& q) {
  JobRecord r;
  Columns(q).Into(r.key);
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
  Columns(q, 3).Into(r.attempts, r.last_error);
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

namespace {

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

}  // namespace

Result<std::pair<int64_t, JobResult>> ReadResultAt(const Db& db, const Query& q, int first,
                                                   int64_t* created_ms) {
  JobResult r;
  int64_t id = 0;
  Columns(q, first).Into(id, r.job_key, r.attempt);
  auto outcome = ParseOutcome(q.Text(first + 3));
  if (!outcome.ok()) {
    return Status::Corruption(db.file() + ": table results, id " + std::to_string(id) + ": " +
                              outcome.status().message());
  }
  r.outcome = *outcome;
  Columns cols(q, first + 4);
  cols.Into(r.generated_text, r.expected, r.needle_token_offset, r.prompt_hash, r.prompt_tokens,
            r.generated_tokens, r.prefill_ms, r.decode_ms, r.total_ms, r.worker_id, r.device,
            r.engine_version, r.error_code, r.error_message, r.retryable);
  if (created_ms != nullptr) cols.Into(*created_ms);
  r.stream = ReadStreamTiming(q, first + 20);
  r.gpu_busy = q.OptReal(first + 25);  // migration 0011
  return std::make_pair(id, std::move(r));
}

Status ReadProbesInto(Db& db, int64_t result_id, JobResult& r) {
  Query pq(db,
           "SELECT layer, positions, needle_rank_min, needle_rank_median, in_topk_fraction,"
           " in_topk_last, topk, ranks_json, topk_last_json FROM probes WHERE result_id = ?"
           " ORDER BY layer",
           "reading table probes");
  pq.Bind(1, result_id);
  NW_ASSIGN_OR_RETURN(
      std::vector<ProbeSummary> probes, ReadRows(pq, [&](const Query& q) -> Result<ProbeSummary> {
        ProbeSummary p;
        Columns(q).Into(p.layer, p.positions, p.needle_rank_min, p.needle_rank_median,
                        p.in_topk_fraction, p.in_topk_last, p.topk);
        const std::string where =
            "table probes, job " + r.job_key + " layer " + std::to_string(p.layer);
        NW_ASSIGN_OR_RETURN(p.ranks, ParseIntArray(db, q.Text(7), where + ", ranks_json"));
        NW_ASSIGN_OR_RETURN(p.topk_last, ParseIntArray(db, q.Text(8), where + ", topk_last_json"));
        return p;
      }));
  for (ProbeSummary& p : probes) r.probes.push_back(std::move(p));
  return Status::Ok();
}

// Rows of: kJobColumns (5), config, kResultColumns (NULLs without a result).
Result<std::vector<CampaignSample>> ReadSamples(Db& db, Query& q, bool with_probes) {
  NW_ASSIGN_OR_RETURN(std::vector<CampaignSample> out,
                      ReadRows(q, [&db](const Query& row) -> Result<CampaignSample> {
                        CampaignSample s;
                        NW_ASSIGN_OR_RETURN(s.job, ReadJob(db, row));
                        s.config = row.Text(5);
                        if (!row.IsNull(6)) {
                          NW_ASSIGN_OR_RETURN(auto r,
                                              ReadResultAt(db, row, 6, &s.result_created_ms));
                          s.result_id = r.first;
                          s.result = std::move(r.second);
                        }
                        return s;
                      }));
  if (with_probes) {
    for (CampaignSample& s : out) {
      if (s.result) NW_RETURN_IF_ERROR(ReadProbesInto(db, s.result_id, *s.result));
    }
  }
  return out;
}

}  // namespace db_internal

using db_internal::Columns;
using db_internal::kJobColumns;
using db_internal::kResultColumns;
using db_internal::Query;
using db_internal::ReadRows;
using db_internal::ReadSamples;

Result<std::vector<JobResult>> Store::Results(int64_t campaign_id) {
  NW_RETURN_IF_ERROR(impl_->CheckCampaign(campaign_id));
  Query q(*impl_->db,
          std::string("SELECT ") + kResultColumns +
              " FROM v_campaign_jobs c JOIN results r ON r.id = c.result_id"
              " WHERE c.campaign_id = ? ORDER BY c.job_key",
          "reading the results of campaign " + std::to_string(campaign_id));
  q.Bind(1, campaign_id);
  NW_ASSIGN_OR_RETURN(auto rows, ReadRows(q, [&](const Query& r) {
                        return db_internal::ReadResultAt(*impl_->db, r, 0, nullptr);
                      }));
  std::vector<JobResult> out;
  out.reserve(rows.size());
  for (auto& [result_id, result] : rows) {
    NW_RETURN_IF_ERROR(db_internal::ReadProbesInto(*impl_->db, result_id, result));
    out.push_back(std::move(result));
  }
  return out;
}

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
  return ReadRows(
      q, [&](const Query& r) { return db_internal::ReadResultAt(*impl_->db, r, 0, nullptr); });
}

}  // namespace nw
