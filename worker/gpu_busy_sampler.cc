#include "worker/gpu_busy_sampler.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace nw {

GpuBusySampler::GpuBusySampler(GpuUtilizationSource& source,
                               std::chrono::milliseconds poll_interval)
    : source_(source), poll_interval_(poll_interval) {}

GpuBusySampler::~GpuBusySampler() { Stop(); }

void GpuBusySampler::Start() {
  std::lock_guard<std::mutex> l(mu_);
  if (thread_.joinable() || stop_) return;
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      PollLocked();
      wake_.wait_for(lock, poll_interval_, [this] { return stop_; });
    }
  });
}

void GpuBusySampler::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t GpuBusySampler::Mark() {
  std::lock_guard<std::mutex> l(mu_);
  PollLocked();
  return points_.empty() ? 0 : points_.back().timestamp_us;
}

void GpuBusySampler::Poll() {
  std::lock_guard<std::mutex> l(mu_);
  PollLocked();
}

void GpuBusySampler::PollLocked() {
  const uint64_t since = points_.empty() ? 0 : points_.back().timestamp_us;
  auto samples = source_.SamplesSince(since);
  if (!samples.ok()) {
    if (!first_error_ && !error_taken_) first_error_ = samples.status().ToString();
    return;
  }
  for (const UtilizationSample& s : *samples) {
    // Only newer samples, in order, with a meaningful value: the sums stay monotone in time.
    if (s.timestamp_us <= since || !std::isfinite(s.busy)) continue;
    if (!points_.empty() && s.timestamp_us <= points_.back().timestamp_us) continue;
    const double busy = std::clamp(s.busy, 0.0, 1.0);
    sum_ += busy;
    ++count_;
    points_.push_back({s.timestamp_us, busy, sum_, count_});
  }
  while (points_.size() > kMaxKept) points_.pop_front();
}

int64_t GpuBusySampler::LastAtOrBefore(uint64_t t) const {
  auto it = std::upper_bound(points_.begin(), points_.end(), t,
                             [](uint64_t v, const Point& p) { return v < p.timestamp_us; });
  return static_cast<int64_t>(it - points_.begin()) - 1;
}

std::pair<double, int64_t> GpuBusySampler::SumBetweenLocked(uint64_t from, uint64_t to) const {
  if (points_.empty() || to <= from) return {0, 0};
  const int64_t hi = LastAtOrBefore(to);
  if (hi < 0) return {0, 0};
  const int64_t lo = LastAtOrBefore(from);
  // Samples older than the oldest one kept were dropped: the interval then starts with it.
  const Point& front = points_.front();
  const double sum_lo = lo >= 0 ? points_[lo].sum : front.sum - front.busy;
  const int64_t count_lo = lo >= 0 ? points_[lo].count : front.count - 1;
  const int64_t n = points_[hi].count - count_lo;
  if (n <= 0) return {0, 0};
  return {points_[hi].sum - sum_lo, n};
}

std::optional<double> GpuBusySampler::BusyBetween(uint64_t from, uint64_t to) const {
  std::lock_guard<std::mutex> l(mu_);
  const auto [sum, n] = SumBetweenLocked(from, to);
  if (n <= 0) return std::nullopt;
  return std::clamp(sum / static_cast<double>(n), 0.0, 1.0);
}

int64_t GpuBusySampler::SamplesBetween(uint64_t from, uint64_t to) const {
  std::lock_guard<std::mutex> l(mu_);
  return SumBetweenLocked(from, to).second;
}

std::optional<std::string> GpuBusySampler::TakeFirstError() {
  std::lock_guard<std::mutex> l(mu_);
  if (!first_error_) return std::nullopt;
  error_taken_ = true;
  return std::exchange(first_error_, std::nullopt);
}

}  // namespace nw
