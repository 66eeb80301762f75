#include "cli/progress.h"

#include <unistd.h>

#include <cmath>

#include "report/report.h"

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

ProgressLine::ProgressLine(std::FILE* out, bool enabled)
    : out_(out),
      enabled_(enabled),
      tty_(report::RedrawAllowedOn(fileno(out))),
      start_(std::chrono::steady_clock::now()) {}

void ProgressLine::Update(int64_t done, int64_t failed, int64_t total, int64_t running,
                          int64_t workers, bool final, const report::JobCostModel* cost) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (start_done_ < 0) start_done_ = done + failed;
  const auto since_draw = now - last_draw_;
  if (!final && since_draw < (tty_ ? std::chrono::milliseconds(200) : std::chrono::seconds(5))) {
    return;
  }
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
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
  if (left > 0) std::fprintf(out_, ", ETA %s", FormatDuration(eta).c_str());
  if (final || !tty_) std::fputc('\n', out_);
  std::fflush(out_);
}

}  // namespace nw::cli
