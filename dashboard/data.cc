#include "dashboard/data.h"

#include <algorithm>
#include <array>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "dashboard/prometheus.h"
#include "report/gate.h"
#include "report/report.h"

namespace nw::dashboard {
namespace {

using json = nlohmann::json;

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
  store->SetStatementLimit(kStatementLimitMs);
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
  NW_ASSIGN_OR_RETURN(std::vector<CampaignControl> controls, store_->CampaignControls());
  for (const CampaignControl& c : controls) {
    run_state[c.campaign_id] = {std::string(CampaignRunStateName(c.state)), c.priority};
  }
  // Throughput: results committed for each campaign's jobs in the last window.
  NW_ASSIGN_OR_RETURN(std::vector<CampaignResultCount> counts,
                      store_->RecentResultCounts(now_wall_ms - kRateWindowMs));
  std::map<int64_t, std::array<int64_t, 3>> recent;
  for (const CampaignResultCount& c : counts) {
    recent[c.campaign_id] = {c.results, c.first_ms, c.last_ms};
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
            {"busy_slot_fraction", BusyFraction(w)},
            {"busy_fraction", w.gpu_busy ? json(*w.gpu_busy) : json(nullptr)}};
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
  NW_ASSIGN_OR_RETURN(std::vector<RecentFailure> failures, store_->RecentFailures(limit));
  json rows = json::array();
  for (const RecentFailure& f : failures) {
    // Reasons come from workers and engines: cut, so one answer stays bounded.
    std::string message = f.error_message;
    if (message.size() > 2000) message = message.substr(0, 2000) + "...";
    rows.push_back({{"at_ms", f.at_ms},
                    {"job_key", f.job_key},
                    {"attempt", f.attempt},
                    {"worker_id", f.worker_id},
                    {"kind", f.kind},
                    {"error_code", f.error_code},
                    {"error_message", message},
                    {"job_state", f.job_state},
                    {"config", f.config ? json(*f.config) : json(nullptr)},
                    {"campaigns", f.campaigns ? json(*f.campaigns) : json(nullptr)}});
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
