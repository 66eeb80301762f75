#include "cli/progress.h"

#include <unistd.h>

#include <cmath>
#include <map>

#include "report/report.h"
#include "report/stats.h"

namespace nw::cli {

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60));
  } else if (s >= 60) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  }
  return buf;
}

ProgressLine::ProgressLine(std::FILE* out, bool enabled, const Clock& clock, bool redraw)
    : out_(out), enabled_(enabled), tty_(redraw), clock_(clock), start_ms_(clock.NowMs()) {}

ProgressLine::ProgressLine(std::FILE* out, bool enabled, const Clock& clock)
    : ProgressLine(out, enabled, clock, report::RedrawAllowedOn(fileno(out))) {}

void ProgressLine::Update(int64_t done, int64_t failed, int64_t total, int64_t running,
                          int64_t workers, bool final, const report::JobCostModel* cost) {
  if (!enabled_) return;
  const int64_t now = clock_.NowMs();
  if (start_done_ < 0) start_done_ = done + failed;
  if (!final && last_draw_ms_ && now - *last_draw_ms_ < (tty_ ? 200 : 5000)) return;
  last_draw_ms_ = now;
  const double elapsed = static_cast<double>(now - start_ms_) / 1000.0;
  const int64_t finished_now = done + failed - start_done_;
  const int64_t left = total - done - failed;
  double eta = finished_now > 0 ? elapsed / static_cast<double>(finished_now) * left : NAN;
  if (cost != nullptr) eta = cost->EtaSeconds(elapsed, workers).value_or(NAN);
  constexpr int kWidth = 30;
  const int filled = total > 0 ? static_cast<int>(kWidth * (done + failed) / total) : kWidth;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '.');
  std::fprintf(out_, "%s[%s] %lld/%lld done, %lld failed, %lld running, %lld workers, %s elapsed",
               tty_ ? "\r\033[K" : "", bar.c_str(), static_cast<long long>(done),
               static_cast<long long>(total), static_cast<long long>(failed),
               static_cast<long long>(running), static_cast<long long>(workers),
               FormatDuration(elapsed).c_str());
  if (finished_now > 0 && elapsed > 0) {
    std::fprintf(out_, ", %s jobs/s",
                 report::FormatNumber(static_cast<double>(finished_now) / elapsed, 2).c_str());
  }
  if (left > 0) std::fprintf(out_, ", ETA %s", FormatDuration(eta).c_str());
  if (final || !tty_) std::fputc('\n', out_);
  std::fflush(out_);
}

std::string GpuBusyLines(const std::vector<std::pair<std::string, double>>& by_worker) {
  std::map<std::string, std::pair<double, int>> by_gpu;  // what -> (sum, workers)
  for (const auto& [gpu, busy] : by_worker) {
    by_gpu[gpu].first += busy;
    by_gpu[gpu].second += 1;
  }
  std::string out;
  for (const auto& [gpu, sum_n] : by_gpu) {
    out += "GPU busy over the run: " + report::FormatBusy(sum_n.first / sum_n.second) + " (" + gpu +
           ", " + std::to_string(sum_n.second) + (sum_n.second == 1 ? " worker)\n" : " workers)\n");
  }
  return out;
}

}  // namespace nw::cli
