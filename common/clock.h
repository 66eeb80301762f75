// Clock: the seam for time. Production code uses SystemClock; tests use FakeClock to drive
// leases, heartbeats and backoff without sleeping. Thread-safety: SystemClock is stateless;
// FakeClock is single-threaded (owned by one test).
#pragma once

#include <chrono>
#include <cstdint>

namespace nw {

/// Milliseconds since the Unix epoch (wall time, for the database) and a monotonic reading.
class Clock {
 public:
  virtual ~Clock() = default;
  /// Monotonic milliseconds, for deadlines, leases and timeouts.
  virtual int64_t NowMs() const = 0;
  /// Wall-clock milliseconds since the Unix epoch, for timestamps stored in the database.
  virtual int64_t WallMs() const = 0;
};

class SystemClock final : public Clock {
 public:
  int64_t NowMs() const override;
  int64_t WallMs() const override;
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_ms = 1'000'000) : now_(start_ms) {}
  int64_t NowMs() const override { return now_; }
  int64_t WallMs() const override { return now_; }
  void Advance(int64_t ms) { now_ += ms; }

 private:
  int64_t now_;
};

}  // namespace nw
