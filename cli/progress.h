// A progress line for long runs: done/failed/total, rate and ETA. On a terminal (TERM not dumb)
// it redraws one line; otherwise it prints a line every few seconds. The ETA comes from the
// per-token cost model of `nw plan` (report/cost.h) when one is given, else from the job count.
// Thread-safety: used by one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "report/cost.h"

namespace nw::cli {

class ProgressLine {
 public:
  ProgressLine(std::FILE* out, bool enabled);
  /// Updates the display (throttled); `final` forces a last draw and a newline.
  void Update(int64_t done, int64_t failed, int64_t total, int64_t running, int64_t workers,
              bool final = false, const report::JobCostModel* cost = nullptr);

 private:
  std::FILE* out_;
  bool enabled_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
  int64_t start_done_ = -1;
};

/// "1h02m", "3m05s", "42s".
std::string FormatDuration(double seconds);

}  // namespace nw::cli
