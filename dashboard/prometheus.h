// The dashboard's /metrics: the Prometheus text exposition format (version 0.0.4), from the
// database (jobs by state and results by outcome, per campaign) and, where a coordinator runs in
// the same process, its LiveMetrics (latency histograms, committed results, counters, workers).
// Every family has HELP and TYPE lines; label values are escaped as the format requires.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dashboard/live_metrics.h"
#include "db/store.h"

namespace nw::dashboard {

/// One campaign's rows for /metrics.
struct CampaignMetrics {
  std::string name;
  CampaignProgress progress;           // jobs by state; pass/miss/other of done jobs
  std::vector<OutcomeCount> outcomes;  // latest results by configuration and outcome
};

/// The whole exposition. `live` is null when no coordinator runs in this process (then only
/// the database's families and nw_dashboard_up appear).
std::string RenderPrometheus(const std::vector<CampaignMetrics>& campaigns,
                             const LiveMetricsSnapshot* live, int64_t now_wall_ms);

/// Of a worker's slots, the fraction busy: leases (prefetched ones included) over slots, at most 1.
double BusyFraction(const LiveWorker& w);

/// A label value escaped for the text format: backslash, double quote and newline.
std::string EscapeLabelValue(const std::string& v);

}  // namespace nw::dashboard
