// Store: named baselines (a campaign's results frozen by `nw baseline set`) and the flaky
// verdicts of `nw gate`'s reruns.
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

using db_internal::Columns;
using db_internal::kJobColumns;
using db_internal::kResultColumns;
using db_internal::Query;
using db_internal::ReadOptionalRow;
using db_internal::ReadRows;
using db_internal::ReadSamples;
using json = nlohmann::json;

namespace {

constexpr const char* kBaselineSelect =
    "SELECT b.name, b.campaign_id, c.name, b.note, b.created_ms, b.updated_ms,"
    " (SELECT COUNT(*) FROM baseline_results br WHERE br.baseline = b.name),"
    " (SELECT COUNT(*) FROM baseline_results br WHERE br.baseline = b.name"
    "  AND br.result_id IS NOT NULL)"
    " FROM baselines b JOIN campaigns c ON c.id = b.campaign_id";

BaselineRecord ReadBaseline(const Query& q) {
  BaselineRecord b;
  Columns(q).Into(b.name, b.campaign_id, b.campaign_name, b.note, b.created_ms, b.updated_ms,
                  b.jobs, b.results);
  return b;
}

bool IsVerdictName(const std::string& v) {
  return v == "flaky" || v == "stable_pass" || v == "stable_miss" || v == "no_answer";
}

}  // namespace

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
  return ReadOptionalRow(q, ReadBaseline);
}

Result<std::vector<BaselineRecord>> Store::ListBaselines() {
  Query q(*impl_->db, std::string(kBaselineSelect) + " ORDER BY b.name", "listing table baselines");
  return ReadRows(q, ReadBaseline);
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
  return ReadRows(q, [&](const Query& r) -> Result<FlakyVerdict> {
    FlakyVerdict v;
    Columns(r)
        .Into(v.job_key, v.gate, v.runs, v.passes, v.misses, v.errors, v.verdict)
        .Skip(1)
        .Into(v.decided_ms);
    try {
      v.result_ids = json::parse(r.Text(7)).get<std::vector<int64_t>>();
    } catch (const json::exception& e) {
      return Status::Corruption(impl_->file() + ": table flaky_verdicts, job " + v.job_key +
                                ": result_ids is not a JSON array of integers (" + e.what() + ")");
    }
    return v;
  });
}

}  // namespace nw
