// A progress line for long runs: done/failed/total, rate and ETA. On a terminal (TERM not dumb)
// it redraws one line; otherwise it prints a line every few seconds. The ETA comes from the
// per-token cost model of `nw plan` (report/cost.h) when one is given, else from the job count.
// Thread-safety: used by one thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "report/cost.h"

namespace nw::cli {

class ProgressLine {
 public:
  /// `clock` (borrowed, must outlive this) times the run from construction (NowMs).
  /// `redraw`: redraw one line in place (a terminal); otherwise a line every 5 seconds.
  ProgressLine(std::FILE* out, bool enabled, const Clock& clock, bool redraw);
  /// The same, redrawing where `out` is a terminal that allows it (report::RedrawAllowedOn).
  ProgressLine(std::FILE* out, bool enabled, const Clock& clock);
  /// Updates the display (throttled: 200 ms when redrawing, else 5 s); `final` forces a last
  /// draw and a newline.
  void Update(int64_t done, int64_t failed, int64_t total, int64_t running, int64_t workers,
              bool final = false, const report::JobCostModel* cost = nullptr);

 private:
  std::FILE* out_;
  bool enabled_;
  bool tty_;
  const Clock& clock_;
  int64_t start_ms_;
  std::optional<int64_t> last_draw_ms_;
  int64_t start_done_ = -1;
};

/// "1h02m", "3m05s", "42s"; "?" for a negative or non-finite value.
std::string FormatDuration(double seconds);

/// The closing lines of a run whose GPU workers measured their GPU (RunSummary::gpu_busy, as
/// (what was measured, busy fraction) per worker): one line per GPU, the workers that shared it
/// averaged: "GPU busy over the run: 91.3% (NVML GPU 0000:19:00.0, 8 workers)\n". Empty when
/// nothing was measured.
std::string GpuBusyLines(const std::vector<std::pair<std::string, double>>& by_worker);

}  // namespace nw::cli
