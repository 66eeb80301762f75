#include "dashboard/data.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "dashboard/prometheus.h"
#include "report/gate.h"
#include "report/query.h"
#include "report/report.h"

namespace nw::dashboard {
namespace {

using json = nlohmann::json;

// SQL on a fresh read-only connection (report/query.h): bounded in time and rows.
Result<report::QueryResult> Sql(const std::filesystem::path& db, const std::string& sql,
                                int64_t max_rows) {
  report::QueryOptions o;
  o.timeout_ms = 10'000;
  o.max_rows = max_rows;
  return report::RunReadOnlyQuery(db, sql, o);
}

int64_t IntAt(const report::QueryResult& r, size_t row, size_t col) {
  if (row >= r.rows.size() || col >= r.rows[row].size()) return 0;
  const report::SqlValue& v = r.rows[row][col];
  if (v.type == report::SqlValue::Type::kInteger) return v.integer;
  if (v.type == report::SqlValue::Type::kReal) return static_cast<int64_t>(v.real);
  return 0;
}

json ProgressJson(const CampaignProgress& p) {
  return {{"total", p.total},   {"queued", p.queued}, {"leased", p.leased}, {"done", p.done},
          {"failed", p.failed}, {"pass", p.pass},     {"miss", p.miss},     {"other", p.other}};
}

}  // namespace

DashboardData::DashboardData(std::unique_ptr<Store> store, std::filesystem::path db_file,
                             CriterionOf criterion_of, const LiveMetrics* live)
    : store_(std::move(store)),
      db_file_(std::move(db_file)),
      criterion_of_(std::move(criterion_of)),
      live_(live) {}

Result<std::unique_ptr<DashboardData>> DashboardData::Open(const std::filesystem::path& db_file,
                                                           CriterionOf criterion_of,
                                                           const LiveMetrics* live) {
  NW_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(db_file, Store::Mode::kReadOnly));
  return std::make_unique<DashboardData>(std::move(store), db_file, std::move(criterion_of), live);
}

Result<Criterion> DashboardData::CriterionFor(const std::string& campaign) {
  NW_ASSIGN_OR_RETURN(std::optional<CampaignRecord> record, store_->FindCampaign(campaign));
  if (!record) {
    return Status::NotFound("no campaign '" + campaign + "' in " + db_file_.string());
  }
  if (!criterion_of_) return Criterion{};
  return criterion_of_(*record);
}

Result<json> DashboardData::Campaigns(int64_t now_wall_ms) {
  NW_ASSIGN_OR_RETURN(std::vector<CampaignRecord> campaigns, store_->ListCampaigns());
  // The daemon's run state of submitted campaigns (table coordinator_campaigns, migration 0004).
  std::map<int64_t, std::pair<std::string, int64_t>> run_state;
  NW_ASSIGN_OR_RETURN(
      report::QueryResult states,
      Sql(db_file_, "SELECT campaign_id, state, priority FROM coordinator_campaigns", 100'000));
  for (const auto& row : states.rows) {
    if (row.size() == 3) run_state[row[0].integer] = {row[1].text, row[2].integer};
  }
  // Throughput: results committed for each campaign's jobs in the last window.
  const int64_t since = now_wall_ms - kRateWindowMs;
  NW_ASSIGN_OR_RETURN(
      report::QueryResult rates,
      Sql(db_file_,
          "SELECT cj.campaign_id, COUNT(*), MIN(r.created_ms), MAX(r.created_ms) FROM results r "
          "JOIN campaign_jobs cj ON cj.job_key = r.job_key WHERE r.created_ms >= " +
              std::to_string(since) + " GROUP BY cj.campaign_id",
          100'000));
  std::map<int64_t, std::array<int64_t, 3>> recent;
  for (size_t i = 0; i < rates.rows.size(); ++i) {
    recent[IntAt(rates, i, 0)] = {IntAt(rates, i, 1), IntAt(rates, i, 2), IntAt(rates, i, 3)};
  }
  json out = json::array();
  for (const CampaignRecord& c : campaigns) {
    NW_ASSIGN_OR_RETURN(CampaignProgress p, store_->Progress(c.id));
    json j;
    j["id"] = c.id;
    j["name"] = c.name;
    j["source_path"] = c.source_path;
    j["created_ms"] = c.created_ms;
    j["updated_ms"] = c.updated_ms;
    j["progress"] = ProgressJson(p);
    if (auto it = run_state.find(c.id); it != run_state.end()) {
      j["run_state"] = it->second.first;
      j["priority"] = it->second.second;
    } else {
      j["run_state"] = nullptr;  // never submitted to a coordinator daemon (`nw run`)
      j["priority"] = nullptr;
    }
    const int64_t remaining = p.queued + p.leased;
    json rate = nullptr, eta = nullptr;
    std::string eta_note;
    if (auto it = recent.find(c.id); it != recent.end() && it->second[0] >= 2) {
      // Over the span from the first result in the window to now.
      const double span_s =
          std::max<double>(1.0, static_cast<double>(now_wall_ms - it->second[1]) / 1000.0);
      const double per_s = static_cast<double>(it->second[0]) / span_s;
      rate = per_s * 60.0;
      eta = remaining > 0 ? json(static_cast<double>(remaining) / per_s) : json(0);
    } else if (remaining == 0) {
      eta = 0;
    } else {
      eta_note = "fewer than 2 results in the last 5 minutes";
    }
    j["results_per_minute"] = rate;
    j["eta_s"] = eta;
    j["eta_note"] = eta_note;
    out.push_back(std::move(j));
  }
  return out;
}

Result<json> DashboardData::Report(const std::string& campaign) {
  NW_ASSIGN_OR_RETURN(Criterion criterion, CriterionFor(campaign));
  NW_ASSIGN_OR_RETURN(report::CampaignReport r,
                      report::LoadCampaignReport(*store_, campaign, criterion));
  return report::RenderJson(r);
}

Result<json> DashboardData::Gates(const std::string& campaign) {
  NW_ASSIGN_OR_RETURN(Criterion criterion, CriterionFor(campaign));
  NW_ASSIGN_OR_RETURN(std::optional<CampaignRecord> record, store_->FindCampaign(campaign));
  NW_ASSIGN_OR_RETURN(std::vector<BaselineRecord> baselines, store_->ListBaselines());
  json out = json::array();
  std::vector<CampaignSample> candidate;
  bool loaded = false;
  int n = 0;
  for (const BaselineRecord& b : baselines) {
    if (b.campaign_id == record->id) continue;  // a campaign against its own frozen results
    if (++n > kMaxGates) break;
    if (!loaded) {
      NW_ASSIGN_OR_RETURN(candidate, store_->CampaignSamples(record->id, false));
      loaded = true;
    }
    json g;
    g["baseline"] = b.name;
    g["baseline_campaign"] = b.campaign_name;
    NW_ASSIGN_OR_RETURN(std::vector<CampaignSample> base, store_->BaselineSamples(b.name, false));
    report::GateOptions options;
    options.criterion = criterion;
    auto gate = report::RunGate(base, candidate, options);
    if (!gate.ok()) {
      g["error"] = gate.status().message();  // e.g. configurations that cannot be paired
    } else {
      g["decision"] = gate->decision;
      g["exit_code"] = gate->exit_code;
      g["axes_under_test"] = gate->axes_under_test;
      g["tests"] = gate->tests;
      g["regressions"] = gate->regressions;
      g["improvements"] = gate->improvements;
      g["insufficient"] = gate->insufficient;
      json shifts = json::array();
      for (const report::BoundaryShift& s : gate->shifts) shifts.push_back(s.summary);
      g["boundary_shifts"] = shifts;
    }
    out.push_back(std::move(g));
  }
  return json{{"campaign", campaign},
              {"baselines", static_cast<int64_t>(baselines.size())},
              {"gates", out}};
}

Result<json> DashboardData::Workers(int64_t now_wall_ms) {
  json out;
  if (live_ != nullptr) {
    const LiveMetricsSnapshot s = live_->Take();
    json live = json::array();
    for (const LiveWorker& w : s.workers) {
      json gpu = nullptr;
      if (!w.gpu_name.empty() || w.gpu_memory_bytes) {
        gpu = {
            {"name", w.gpu_name},
            {"memory_total_bytes", w.gpu_memory_bytes ? json(*w.gpu_memory_bytes) : json(nullptr)},
            {"busy_slot_fraction", BusyFraction(w)}};
      }
      live.push_back(
          {{"id", w.id},
           {"host", w.host},
           {"device", w.device},
           {"backends", w.backends},
           {"slots", w.slots},
           {"leases", w.busy},
           {"busy_slot_fraction", BusyFraction(w)},
           {"state", w.draining ? "draining" : (w.busy > 0 ? "busy" : "idle")},
           {"heartbeat_age_ms",
            w.heartbeat_age_ms + std::max<int64_t>(0, now_wall_ms - s.workers_published_wall_ms)},
           {"gpu", gpu}});
    }
    out["live"] = live;
  } else {
    out["live"] = nullptr;  // no coordinator in this process
  }
  NW_ASSIGN_OR_RETURN(std::vector<WorkerRecord> rows, store_->ListWorkers());
  std::sort(rows.begin(), rows.end(), [](const WorkerRecord& a, const WorkerRecord& b) {
    return a.last_seen_ms > b.last_seen_ms;
  });
  json db = json::array();
  for (size_t i = 0; i < rows.size() && i < static_cast<size_t>(kMaxWorkerRows); ++i) {
    const WorkerRecord& w = rows[i];
    db.push_back({{"id", w.id},
                  {"host", w.host},
                  {"device", w.device},
                  {"state", w.state},
                  {"first_seen_ms", w.first_seen_ms},
                  {"last_seen_ms", w.last_seen_ms}});
  }
  out["recorded"] = db;
  out["recorded_total"] = static_cast<int64_t>(rows.size());
  return out;
}

Result<json> DashboardData::Failures(int limit) {
  limit = std::clamp(limit, 1, kMaxFailures);
  const std::string sql =
      "SELECT f.at_ms, f.job_key, f.attempt, f.worker_id, f.kind, f.error_code, f.error_message, "
      "j.state AS job_state, v.config, "
      "(SELECT group_concat(c.name, ', ') FROM campaign_jobs cj JOIN campaigns c ON c.id = "
      "cj.campaign_id WHERE cj.job_key = f.job_key) AS campaigns "
      "FROM (SELECT a.ended_ms AS at_ms, a.job_key, a.attempt, a.worker_id, "
      "'attempt_' || a.status AS kind, a.error_code, a.error_message FROM attempts a "
      "WHERE a.status IN ('failed', 'lost') AND a.ended_ms IS NOT NULL "
      "UNION ALL SELECT r.created_ms, r.job_key, r.attempt, r.worker_id, r.outcome, r.error_code, "
      "r.error_message FROM results r WHERE r.outcome IN ('engine_error', 'timeout')) f "
      "JOIN jobs j ON j.key = f.job_key JOIN v_job_config v ON v.key = f.job_key "
      "ORDER BY f.at_ms DESC LIMIT " +
      std::to_string(limit);
  NW_ASSIGN_OR_RETURN(report::QueryResult r, Sql(db_file_, sql, limit));
  json rows = json::parse(report::FormatQueryJson(r).dump());
  // Reasons come from workers and engines: cut, so one answer stays bounded.
  for (json& row : rows) {
    if (row["error_message"].is_string()) {
      std::string m = row["error_message"].get<std::string>();
      if (m.size() > 2000) m = m.substr(0, 2000) + "...";
      row["error_message"] = m;
    }
  }
  return json{{"failures", rows}, {"limit", limit}};
}

Result<std::string> DashboardData::Metrics(int64_t now_wall_ms) {
  NW_ASSIGN_OR_RETURN(std::vector<CampaignRecord> campaigns, store_->ListCampaigns());
  std::vector<CampaignMetrics> rows;
  for (const CampaignRecord& c : campaigns) {
    CampaignMetrics m;
    m.name = c.name;
    NW_ASSIGN_OR_RETURN(m.progress, store_->Progress(c.id));
    NW_ASSIGN_OR_RETURN(m.outcomes, store_->OutcomeCounts(c.id));
    rows.push_back(std::move(m));
  }
  if (live_ == nullptr) return RenderPrometheus(rows, nullptr, now_wall_ms);
  const LiveMetricsSnapshot s = live_->Take();
  return RenderPrometheus(rows, &s, now_wall_ms);
}

}  // namespace nw::dashboard
