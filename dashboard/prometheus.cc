#include "dashboard/prometheus.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <sstream>

namespace nw::dashboard {
namespace {

// Shortest round-trip text of a double; the format's spellings of the special values.
std::string Num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// A bucket bound as people write it: 0.0005, not 5e-04.
std::string Bound(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::general);
  return std::string(buf, r.ptr);
}

class Writer {
 public:
  void Family(const std::string& name, const std::string& type, const std::string& help) {
    out_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  // labels: already "k=\"v\",..." (escaped), or "".
  void Sample(const std::string& name, const std::string& labels, double v) {
    out_ << name;
    if (!labels.empty()) out_ << "{" << labels << "}";
    out_ << " " << Num(v) << "\n";
  }
  void Histogram(const std::string& name, const std::string& labels, const LatencyHistogram& h) {
    const std::string sep = labels.empty() ? "" : labels + ",";
    int64_t cumulative = 0;
    for (size_t i = 0; i < LatencyHistogram::kBounds.size(); ++i) {
      cumulative += h.buckets[i];
      Sample(name + "_bucket", sep + "le=\"" + Bound(LatencyHistogram::kBounds[i]) + "\"",
             static_cast<double>(cumulative));
    }
    Sample(name + "_bucket", sep + "le=\"+Inf\"", static_cast<double>(h.count));
    Sample(name + "_sum", labels, h.sum);
    Sample(name + "_count", labels, static_cast<double>(h.count));
  }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

std::string L(const std::string& k, const std::string& v) {
  return k + "=\"" + EscapeLabelValue(v) + "\"";
}

}  // namespace

double BusyFraction(const LiveWorker& w) {
  if (w.slots <= 0) return 0;
  return std::min(1.0, static_cast<double>(w.busy) / w.slots);
}

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string RenderPrometheus(const std::vector<CampaignMetrics>& campaigns,
                             const LiveMetricsSnapshot* live, int64_t now_wall_ms) {
  Writer w;
  w.Family("nw_dashboard_up", "gauge",
           "1 while the dashboard answers; nw_coordinator_live says whether a coordinator runs "
           "in this process");
  w.Sample("nw_dashboard_up", "", 1);
  w.Family("nw_coordinator_live", "gauge",
           "1 when this process runs the coordinator (live metrics below), 0 for the database "
           "only");
  w.Sample("nw_coordinator_live", "", live != nullptr ? 1 : 0);

  w.Family("nw_campaign_jobs", "gauge", "Jobs of a campaign by state (database)");
  for (const CampaignMetrics& c : campaigns) {
    const CampaignProgress& p = c.progress;
    for (const auto& [state, n] : std::map<std::string, int64_t>{
             {"queued", p.queued}, {"leased", p.leased}, {"done", p.done}, {"failed", p.failed}}) {
      w.Sample("nw_campaign_jobs", L("campaign", c.name) + "," + L("state", state),
               static_cast<double>(n));
    }
  }
  w.Family("nw_campaign_size_jobs", "gauge", "Jobs of a campaign, all states (database)");
  for (const CampaignMetrics& c : campaigns) {
    w.Sample("nw_campaign_size_jobs", L("campaign", c.name), static_cast<double>(c.progress.total));
  }
  w.Family("nw_campaign_results", "gauge",
           "Latest results of a campaign's jobs by configuration and outcome (database)");
  for (const CampaignMetrics& c : campaigns) {
    for (const OutcomeCount& o : c.outcomes) {
      w.Sample("nw_campaign_results",
               L("campaign", c.name) + "," + L("config", o.config) + "," +
                   L("outcome", std::string(OutcomeName(o.outcome))),
               static_cast<double>(o.count));
    }
  }
  if (live == nullptr) return w.str();

  w.Family("nw_results_committed_total", "counter",
           "Results this coordinator committed since it started, by outcome");
  for (const auto& [outcome, n] : live->results) {
    w.Sample("nw_results_committed_total", L("outcome", outcome), static_cast<double>(n));
  }
  w.Family("nw_coordinator_events_total", "counter",
           "The coordinator's counters since it started (retried attempts, jobs given up, "
           "workers lost, refused or malformed messages, ...)");
  for (const auto& [event, n] : live->events) {
    w.Sample("nw_coordinator_events_total", L("event", event), static_cast<double>(n));
  }
  w.Family("nw_dispatch_seconds", "histogram",
           "From the scheduler granting a batch of leases to their JOB messages sent (recording "
           "the leases in SQLite included), per batch");
  w.Histogram("nw_dispatch_seconds", "", live->dispatch);
  w.Family("nw_commit_seconds", "histogram",
           "From a result's arrival at the coordinator to its commit (batching wait included), "
           "per result");
  w.Histogram("nw_commit_seconds", "", live->commit);
  w.Family("nw_sqlite_write_seconds", "histogram",
           "Duration of the coordinator's SQLite write transactions, by Store operation");
  for (const auto& [op, h] : live->db_write) {
    w.Histogram("nw_sqlite_write_seconds", L("op", op), h);
  }

  w.Family("nw_workers_connected", "gauge", "Workers registered with the coordinator");
  w.Sample("nw_workers_connected", "", static_cast<double>(live->workers.size()));
  w.Family("nw_worker_slots", "gauge", "Slots (jobs at once) a worker registered with");
  for (const LiveWorker& x : live->workers) {
    w.Sample("nw_worker_slots",
             L("worker", x.id) + "," + L("host", x.host) + "," + L("device", x.device), x.slots);
  }
  w.Family("nw_worker_leases", "gauge",
           "Leases a worker holds: running or prefetched (up to its slots plus its prefetch)");
  for (const LiveWorker& x : live->workers) {
    w.Sample("nw_worker_leases", L("worker", x.id), x.busy);
  }
  w.Family("nw_worker_heartbeat_age_seconds", "gauge",
           "Since the coordinator last heard from the worker (any message)");
  for (const LiveWorker& x : live->workers) {
    const double age =
        static_cast<double>(x.heartbeat_age_ms) / 1000.0 +
        static_cast<double>(std::max<int64_t>(0, now_wall_ms - live->workers_published_wall_ms)) /
            1000.0;
    w.Sample("nw_worker_heartbeat_age_seconds", L("worker", x.id), age);
  }
  w.Family("nw_gpu_slot_occupancy_fraction", "gauge",
           "Of a GPU worker's slots, the fraction holding a lease (at most 1; not the GPU's "
           "utilisation: see nw_gpu_busy_fraction)");
  for (const LiveWorker& x : live->workers) {
    if (x.gpu_name.empty() && !x.gpu_memory_bytes) continue;
    w.Sample("nw_gpu_slot_occupancy_fraction", L("worker", x.id) + "," + L("gpu", x.gpu_name),
             BusyFraction(x));
  }
  w.Family("nw_gpu_busy_fraction", "gauge",
           "The GPU's busy fraction (NVML utilization samples: the share of time a kernel ran) "
           "over the last interval its worker reported; only for workers that measure it");
  for (const LiveWorker& x : live->workers) {
    if (!x.gpu_busy) continue;
    w.Sample("nw_gpu_busy_fraction", L("worker", x.id) + "," + L("gpu", x.gpu_name), *x.gpu_busy);
  }
  w.Family("nw_gpu_memory_total_bytes", "gauge",
           "Total memory of a worker's GPU as nvidia-smi reported it at registration (memory in "
           "use is not reported)");
  for (const LiveWorker& x : live->workers) {
    if (!x.gpu_memory_bytes) continue;
    w.Sample("nw_gpu_memory_total_bytes", L("worker", x.id) + "," + L("gpu", x.gpu_name),
             static_cast<double>(*x.gpu_memory_bytes));
  }
  return w.str();
}

}  // namespace nw::dashboard
