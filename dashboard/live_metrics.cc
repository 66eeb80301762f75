#include "dashboard/live_metrics.h"

#include <utility>

namespace nw {

void LatencyHistogram::Observe(double seconds) {
  if (!(seconds >= 0)) seconds = 0;  // NaN or a clock step backwards
  for (size_t i = 0; i < kBounds.size(); ++i) {
    if (seconds <= kBounds[i]) {
      ++buckets[i];
      break;
    }
  }
  ++count;
  sum += seconds;
}

void LiveMetrics::ObserveDispatch(double seconds) {
  std::lock_guard<std::mutex> l(mu_);
  s_.dispatch.Observe(seconds);
}

void LiveMetrics::ObserveCommit(double seconds) {
  std::lock_guard<std::mutex> l(mu_);
  s_.commit.Observe(seconds);
}

void LiveMetrics::ObserveDbWrite(std::string_view operation, double seconds) {
  std::lock_guard<std::mutex> l(mu_);
  s_.db_write[std::string(operation)].Observe(seconds);
}

void LiveMetrics::CountResult(std::string_view outcome) {
  std::lock_guard<std::mutex> l(mu_);
  ++s_.results[std::string(outcome)];
}

void LiveMetrics::Publish(std::vector<LiveWorker> workers, std::map<std::string, int64_t> events,
                          int64_t wall_ms) {
  std::lock_guard<std::mutex> l(mu_);
  s_.workers = std::move(workers);
  s_.events = std::move(events);
  s_.workers_published = true;
  s_.workers_published_wall_ms = wall_ms;
}

LiveMetricsSnapshot LiveMetrics::Take() const {
  std::lock_guard<std::mutex> l(mu_);
  return s_;
}

}  // namespace nw
