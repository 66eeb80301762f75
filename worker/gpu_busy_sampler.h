// GpuBusySampler: a GPU's busy fraction over intervals, from a GpuUtilizationSource's samples.
//
// The sampler keeps the samples it has read (up to kMaxKept, oldest dropped first) as running
// sums, so any interval between two marks is answered without rereading the device. A mark is
// the timestamp of the newest sample read when it was taken (Mark() reads the source first), so
// intervals are measured in the source's own time: no clock has to agree with the driver's. The
// busy fraction between two marks is the mean of the samples in (from, to]; nullopt when there
// is none (an interval shorter than the driver's sample period, about 1/6 s to 1 s, or a source
// that failed): absent, never 0.
//
// Threads and ownership: the sampler borrows its source (which must outlive it) and owns one
// thread, started by Start() and joined by Stop() or the destructor, that reads the source every
// poll_interval so samples are taken off the driver's ring buffer before it wraps during a long
// job. Every public method may be called from any thread (one mutex serializes them and the
// reads of the source).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "worker/gpu_utilization.h"

namespace nw {

class GpuBusySampler {
 public:
  static constexpr size_t kMaxKept = size_t{1} << 17;  // at 6 samples/s, about 6 hours

  explicit GpuBusySampler(GpuUtilizationSource& source,
                          std::chrono::milliseconds poll_interval = std::chrono::seconds(1));
  ~GpuBusySampler();
  GpuBusySampler(const GpuBusySampler&) = delete;
  GpuBusySampler& operator=(const GpuBusySampler&) = delete;

  /// Starts the polling thread (once; later calls do nothing).
  void Start();
  /// Stops and joins the polling thread (idempotent).
  void Stop();

  /// Reads the source, then returns the newest sample's timestamp (0 before any sample).
  uint64_t Mark();
  /// Reads the source once (the polling thread's step; tests call it directly).
  void Poll();
  /// Mean busy fraction of the samples with from < timestamp <= to; nullopt when none is known.
  std::optional<double> BusyBetween(uint64_t from, uint64_t to) const;
  /// How many samples BusyBetween(from, to) averages.
  int64_t SamplesBetween(uint64_t from, uint64_t to) const;
  /// The first error the source returned, once: the caller logs it (nullopt afterwards).
  std::optional<std::string> TakeFirstError();
  /// The source's name.
  std::string Name() const { return source_.Name(); }

 private:
  struct Point {
    uint64_t timestamp_us;
    double busy;    // this sample's
    double sum;     // of busy over every sample read so far, this one included
    int64_t count;  // samples read so far, this one included
  };
  void PollLocked();
  // Index of the last point with timestamp <= t, or -1.
  int64_t LastAtOrBefore(uint64_t t) const;
  // The (sum, count) of the samples in (from, to]; count 0 when none.
  std::pair<double, int64_t> SumBetweenLocked(uint64_t from, uint64_t to) const;

  GpuUtilizationSource& source_;
  const std::chrono::milliseconds poll_interval_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Point> points_;  // ascending timestamps
  double sum_ = 0;
  int64_t count_ = 0;
  std::optional<std::string> first_error_;
  bool error_taken_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace nw
