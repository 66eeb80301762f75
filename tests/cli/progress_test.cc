// `nw run`'s progress line (cli/progress.h): the exact text it prints with a fake clock, its
// ETA from the job count and from the per-token cost model (report/cost.h), its rate, its
// throttling and redrawing, and the closing GPU busy lines.
#include "cli/progress.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

namespace nw::cli {
namespace {

// What a ProgressLine wrote to a temporary file.
class Captured {
 public:
  Captured() : f_(std::tmpfile()) {}
  ~Captured() {
    if (f_ != nullptr) std::fclose(f_);
  }
  Captured(const Captured&) = delete;
  Captured& operator=(const Captured&) = delete;
  std::FILE* file() { return f_; }
  // Everything written since the last call.
  std::string Take() {
    std::fflush(f_);
    const long end = std::ftell(f_);
    std::string out(static_cast<size_t>(end - read_), '\0');
    std::fseek(f_, read_, SEEK_SET);
    const size_t n = std::fread(out.data(), 1, out.size(), f_);
    out.resize(n);
    read_ = end;
    std::fseek(f_, end, SEEK_SET);
    return out;
  }

 private:
  std::FILE* f_;
  long read_ = 0;
};

JobSpec Job(int64_t tokens, int trial) {
  JobSpec s;
  s.model_digest = "d";
  s.engine_version = "e";
  s.task = "niah-single";
  s.haystack = "noise";
  s.context_length = tokens;
  s.needle_position = 0.5;
  s.topk = 8;
  s.backend = "cpu";
  s.trial = trial;
  return s;
}

TEST(FormatDuration, RoundsToSecondsMinutesAndHours) {
  EXPECT_EQ(FormatDuration(0), "0s");
  EXPECT_EQ(FormatDuration(42.4), "42s");
  EXPECT_EQ(FormatDuration(59.6), "1m00s");
  EXPECT_EQ(FormatDuration(185), "3m05s");
  EXPECT_EQ(FormatDuration(3720), "1h02m");
  EXPECT_EQ(FormatDuration(-1), "?");
  EXPECT_EQ(FormatDuration(NAN), "?");
  EXPECT_EQ(FormatDuration(INFINITY), "?");
}

TEST(ProgressLine, CountEtaRateAndThrottlingOffATerminal) {
  Captured out;
  FakeClock clock;
  ProgressLine line(out.file(), true, clock, /*redraw=*/false);
  line.Update(0, 0, 10, 2, 2);
  EXPECT_EQ(out.Take(),
            "[..............................] 0/10 done, 0 failed, 2 running, 2 workers, 0s "
            "elapsed, ETA ?\n");
  clock.Advance(4'999);
  line.Update(2, 0, 10, 2, 2);  // within 5 s of the last line: nothing
  EXPECT_EQ(out.Take(), "");
  clock.Advance(1);
  line.Update(3, 1, 10, 2, 2);  // 4 finished in 5 s: 0.8/s; 6 left: 5 / 4 x 6 = 7.5 s
  EXPECT_EQ(out.Take(),
            "[############..................] 3/10 done, 1 failed, 2 running, 2 workers, 5s "
            "elapsed, 0.8 jobs/s, ETA 8s\n");
  clock.Advance(1'000);
  line.Update(10, 0, 10, 0, 0, /*final=*/true);  // forced; nothing left: no ETA
  EXPECT_EQ(out.Take(),
            "[##############################] 10/10 done, 0 failed, 0 running, 0 workers, 6s "
            "elapsed, 1.67 jobs/s\n");
}

TEST(ProgressLine, RateAndEtaCountOnlyWhatThisRunFinished) {
  Captured out;
  FakeClock clock;
  ProgressLine line(out.file(), true, clock, false);
  line.Update(5, 0, 10, 1, 1);  // 5 were done before the run: no rate, no estimate yet
  EXPECT_NE(out.Take().find("5/10 done, 0 failed, 1 running, 1 workers, 0s elapsed, ETA ?\n"),
            std::string::npos);
  clock.Advance(5'000);
  line.Update(6, 0, 10, 1, 1);  // 1 in 5 s; 4 left: 20 s (not 5 / 6 x 4)
  EXPECT_NE(out.Take().find("6/10 done, 0 failed, 1 running, 1 workers, 5s elapsed, 0.2 jobs/s, "
                            "ETA 20s\n"),
            std::string::npos);
}

TEST(ProgressLine, EtaFollowsThePerTokenCostModel) {
  // History: 1 ms per prompt token on cpu. Jobs of 256, 256 and 2048 tokens.
  report::JobCostModel cost({BackendTiming{"cpu", 1.0, 10}});
  cost.AddPending("a", Job(256, 0));
  cost.AddPending("b", Job(256, 1));
  cost.AddPending("c", Job(2048, 2));
  Captured out;
  FakeClock clock;
  ProgressLine line(out.file(), true, clock, false);
  // Nothing finished: the cost left (2,560 ms) over the 2 workers: 1.28 s.
  line.Update(0, 0, 3, 2, 2, false, &cost);
  EXPECT_NE(out.Take().find("0/3 done, 0 failed, 2 running, 2 workers, 0s elapsed, ETA 1s\n"),
            std::string::npos);
  // One 256-token job took 5 s: 2,304 ms of cost left at 256 per 5 s is 45 s (by the job
  // count it would have been 5 s x 2 = 10 s).
  cost.Finished("a");
  clock.Advance(5'000);
  line.Update(1, 0, 3, 2, 2, false, &cost);
  EXPECT_EQ(out.Take(),
            "[##########....................] 1/3 done, 0 failed, 2 running, 2 workers, 5s "
            "elapsed, 0.2 jobs/s, ETA 45s\n");
  // Unknown backends and nothing finished: "?".
  report::JobCostModel blind({});
  blind.AddPending("x", Job(256, 0));
  Captured out2;
  ProgressLine line2(out2.file(), true, clock, false);
  line2.Update(0, 0, 1, 1, 1, false, &blind);
  EXPECT_NE(out2.Take().find(", ETA ?\n"), std::string::npos);
}

TEST(ProgressLine, RedrawsOneLineOnATerminal) {
  Captured out;
  FakeClock clock;
  ProgressLine line(out.file(), true, clock, /*redraw=*/true);
  line.Update(0, 0, 2, 1, 1);
  EXPECT_EQ(out.Take(),
            "\r\033[K[..............................] 0/2 done, 0 failed, 1 running, 1 workers, "
            "0s elapsed, ETA ?");
  clock.Advance(199);
  line.Update(1, 0, 2, 1, 1);  // within 200 ms: nothing
  EXPECT_EQ(out.Take(), "");
  clock.Advance(1);
  line.Update(1, 0, 2, 1, 1);
  EXPECT_EQ(out.Take(),
            "\r\033[K[###############...............] 1/2 done, 0 failed, 1 running, 1 workers, "
            "0s elapsed, 5 jobs/s, ETA 0s");
  line.Update(2, 0, 2, 0, 0, true);  // the last one ends the line
  EXPECT_EQ(out.Take(),
            "\r\033[K[##############################] 2/2 done, 0 failed, 0 running, 0 workers, "
            "0s elapsed, 10 jobs/s\n");
}

TEST(ProgressLine, DisabledPrintsNothing) {
  Captured out;
  FakeClock clock;
  ProgressLine line(out.file(), false, clock, false);
  line.Update(1, 0, 2, 1, 1);
  line.Update(2, 0, 2, 0, 0, true);
  EXPECT_EQ(out.Take(), "");
}

TEST(GpuBusyLines, OneLinePerGpuWithItsWorkersAveraged) {
  EXPECT_EQ(GpuBusyLines({}), "");
  EXPECT_EQ(GpuBusyLines({{"NVML GPU 0000:19:00.0", 0.9},
                          {"NVML GPU 0000:3B:00.0", 0.5},
                          {"NVML GPU 0000:19:00.0", 0.8}}),
            "GPU busy over the run: 85% (NVML GPU 0000:19:00.0, 2 workers)\n"
            "GPU busy over the run: 50% (NVML GPU 0000:3B:00.0, 1 worker)\n");
}

}  // namespace
}  // namespace nw::cli
