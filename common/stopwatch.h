// Elapsed time for the timings results report (prefill_ms, decode_ms, total_ms): one definition,
// steady clock, fractional milliseconds. Thread-safety: pure function.
#pragma once

#include <chrono>

namespace nw {

/// Milliseconds (fractional) from `t0` to now on the steady clock.
inline double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace nw
