// LiveMetrics: what the coordinator measures while it runs, for the dashboard's /metrics and
// /api/workers (dashboard/server.h). The coordinator's loop (coordinator/server.cc) writes it
// through the hooks below; the dashboard's I/O thread reads it with Take(). One object per
// coordinator, owned by whoever starts both (cli/http_dashboard.cc) and passed to each by
// reference (ServerOptions::metrics), so it outlives them.
//
// What it holds: latency histograms (dispatch, commit, SQLite writes by operation), counters of
// committed results by outcome and the coordinator's own counters (retries, jobs given up,
// workers lost, ...), and the registered workers as the scheduler sees them (slots, leases held,
// when each was last heard from, the GPU it reported). Jobs by state per campaign are not here: the
// dashboard reads them from the database.
//
// Thread-safety: every method may be called from any thread (one mutex; the hooks take it for a
// few additions, Take() copies).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nw {

/// A Prometheus-style histogram of seconds with fixed bucket bounds (kLatencyBounds).
struct LatencyHistogram {
  static constexpr std::array<double, 14> kBounds = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  std::array<int64_t, kBounds.size()> buckets{};  // observations <= kBounds[i] (not cumulative)
  int64_t count = 0;                              // all observations (+Inf bucket)
  double sum = 0;                                 // seconds

  void Observe(double seconds);
};

/// One registered worker as the coordinator's scheduler sees it.
struct LiveWorker {
  std::string id;
  std::string host;
  std::string device;  // the READY capability "device" ("cpu", a GPU's name, ...)
  std::vector<std::string> backends;
  int slots = 0;
  int busy = 0;  // leases it holds, prefetched ones included (and expired attempts it may
                 // still be running): may exceed slots
  bool draining = false;
  int64_t heartbeat_age_ms = 0;  // since it was last heard from (any message), when published
  std::string gpu_name;          // the "gpu" capability, where the worker reported one
  std::optional<int64_t> gpu_memory_bytes;  // total memory of its GPU (nvidia-smi), where known
  /// The GPU's busy fraction (NVML) over the last interval the worker reported (HEARTBEAT);
  /// nullopt until it reports one (CPU workers never do).
  std::optional<double> gpu_busy;
};

struct LiveMetricsSnapshot {
  LatencyHistogram dispatch;  // grant of a batch of leases -> their JOBs sent (recording incl.)
  LatencyHistogram commit;    // a result's arrival -> its commit (batching wait incl.)
  std::map<std::string, LatencyHistogram> db_write;  // by Store operation
  std::map<std::string, int64_t> results;            // committed results by outcome name
  std::map<std::string, int64_t> events;             // as last published
  std::vector<LiveWorker> workers;                   // as last published
  bool workers_published = false;  // false until the coordinator's loop publishes once
  int64_t workers_published_wall_ms = 0;
};

class LiveMetrics {
 public:
  LiveMetrics() = default;
  LiveMetrics(const LiveMetrics&) = delete;
  LiveMetrics& operator=(const LiveMetrics&) = delete;

  void ObserveDispatch(double seconds);
  void ObserveCommit(double seconds);
  void ObserveDbWrite(std::string_view operation, double seconds);
  void CountResult(std::string_view outcome);
  /// The loop's state, every few hundred milliseconds: the registered workers and its counters
  /// (RunSummary's: retried, failed_now, workers_lost, ...; monotone while it runs).
  void Publish(std::vector<LiveWorker> workers, std::map<std::string, int64_t> events,
               int64_t wall_ms);

  LiveMetricsSnapshot Take() const;

 private:
  mutable std::mutex mu_;
  LiveMetricsSnapshot s_;
};

}  // namespace nw
