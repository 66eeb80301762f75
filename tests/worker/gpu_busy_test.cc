// GPU busy (worker/gpu_busy_sampler.h, worker/gpu_utilization.h): the sampler's arithmetic on an
// injected fake source, its thread's start and stop, the NVML source through dlopen against a
// stand-in library (tests/worker/fake_nvml.cc) and against a missing one, and, on a machine with
// an NVIDIA GPU and a CUDA build, the real NVML (skipped elsewhere, saying why).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "worker/gpu_busy_sampler.h"
#include "worker/gpu_utilization.h"

namespace nw {
namespace {

// Hands out the samples queued with Add() that are newer than asked for; an error when told.
class FakeSource final : public GpuUtilizationSource {
 public:
  void Add(uint64_t t, double busy) {
    std::lock_guard<std::mutex> l(mu_);
    samples_.push_back({t, busy});
  }
  void Fail(std::string why) {
    std::lock_guard<std::mutex> l(mu_);
    fail_ = std::move(why);
  }
  int calls() {
    std::lock_guard<std::mutex> l(mu_);
    return calls_;
  }
  Result<std::vector<UtilizationSample>> SamplesSince(uint64_t since_us) override {
    std::lock_guard<std::mutex> l(mu_);
    ++calls_;
    if (!fail_.empty()) return Status::Unavailable(fail_);
    std::vector<UtilizationSample> out;
    for (const auto& s : samples_) {
      if (s.timestamp_us > since_us) out.push_back(s);
    }
    return out;
  }
  std::string Name() const override { return "fake GPU"; }

 private:
  std::mutex mu_;
  std::vector<UtilizationSample> samples_;
  std::string fail_;
  int calls_ = 0;
};

TEST(GpuBusySampler, MeanOfTheSamplesBetweenTwoMarks) {
  FakeSource src;
  GpuBusySampler sampler(src);
  EXPECT_EQ(sampler.Mark(), 0u);  // nothing yet
  src.Add(100, 0.2);
  src.Add(200, 0.4);
  const uint64_t a = sampler.Mark();
  EXPECT_EQ(a, 200u);
  src.Add(300, 1.0);
  src.Add(400, 0.5);
  const uint64_t b = sampler.Mark();
  EXPECT_EQ(b, 400u);
  ASSERT_TRUE(sampler.BusyBetween(a, b).has_value());
  EXPECT_DOUBLE_EQ(*sampler.BusyBetween(a, b), 0.75);  // (1.0 + 0.5) / 2
  EXPECT_EQ(sampler.SamplesBetween(a, b), 2);
  EXPECT_DOUBLE_EQ(*sampler.BusyBetween(0, b), (0.2 + 0.4 + 1.0 + 0.5) / 4);
  EXPECT_DOUBLE_EQ(*sampler.BusyBetween(150, 350), (0.4 + 1.0) / 2);  // any bounds, not only marks
}

TEST(GpuBusySampler, NoSampleInTheIntervalIsUnknownNotZero) {
  FakeSource src;
  GpuBusySampler sampler(src);
  EXPECT_FALSE(sampler.BusyBetween(0, 1000).has_value());  // no sample at all
  src.Add(100, 0.0);
  const uint64_t a = sampler.Mark();
  const uint64_t b = sampler.Mark();  // a job shorter than the sample period
  EXPECT_EQ(a, b);
  EXPECT_FALSE(sampler.BusyBetween(a, b).has_value());
  EXPECT_EQ(sampler.SamplesBetween(a, b), 0);
  // A truly idle GPU is 0, which is known.
  ASSERT_TRUE(sampler.BusyBetween(0, a).has_value());
  EXPECT_EQ(*sampler.BusyBetween(0, a), 0.0);
}

TEST(GpuBusySampler, OutOfOrderRepeatedAndOutOfRangeSamplesDoNotCorruptTheSums) {
  FakeSource src;
  GpuBusySampler sampler(src);
  src.Add(100, 0.5);
  sampler.Poll();
  src.Add(100, 1.0);   // the same timestamp again: ignored
  src.Add(300, 7.0);   // clamped to 1
  src.Add(250, 0.0);   // older than the newest one read in the same batch: ignored
  src.Add(400, -3.0);  // clamped to 0
  sampler.Poll();
  EXPECT_EQ(sampler.SamplesBetween(0, 1000), 3);
  EXPECT_DOUBLE_EQ(*sampler.BusyBetween(0, 1000), (0.5 + 1.0 + 0.0) / 3);
}

TEST(GpuBusySampler, KeepsABoundedHistory) {
  FakeSource src;
  GpuBusySampler sampler(src);
  const uint64_t n = GpuBusySampler::kMaxKept + 10;
  for (uint64_t t = 1; t <= n; ++t) src.Add(t, t <= 10 ? 0.0 : 1.0);
  sampler.Poll();
  // The ten oldest (the only idle ones) were dropped: an interval reaching back before the
  // oldest kept sample starts with it.
  EXPECT_EQ(sampler.SamplesBetween(0, n), static_cast<int64_t>(GpuBusySampler::kMaxKept));
  EXPECT_DOUBLE_EQ(*sampler.BusyBetween(0, n), 1.0);
  EXPECT_DOUBLE_EQ(*sampler.BusyBetween(n - 2, n), 1.0);
}

TEST(GpuBusySampler, ASourceErrorIsReportedOnceAndLeavesTheValueUnknown) {
  FakeSource src;
  GpuBusySampler sampler(src);
  src.Fail("driver went away");
  const uint64_t a = sampler.Mark();
  const uint64_t b = sampler.Mark();
  EXPECT_FALSE(sampler.BusyBetween(a, b).has_value());
  auto error = sampler.TakeFirstError();
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("driver went away"), std::string::npos) << *error;
  sampler.Poll();
  EXPECT_FALSE(sampler.TakeFirstError().has_value());  // once
}

TEST(GpuBusySampler, ThreadPollsUntilStoppedAndJoins) {
  FakeSource src;
  src.Add(10, 1.0);
  {
    GpuBusySampler sampler(src, std::chrono::milliseconds(1));
    sampler.Start();
    sampler.Start();  // once
    // The thread reads the source on its own (no Mark() here); wait for it, without a deadline
    // on how fast: the test fails by the ctest timeout if it never does.
    while (src.calls() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    sampler.Stop();
    const int after_stop = src.calls();
    sampler.Stop();                      // idempotent
    EXPECT_EQ(src.calls(), after_stop);  // joined: nothing polls any more
    EXPECT_EQ(sampler.SamplesBetween(0, 10), 1);
  }
  // The destructor joins a running thread too.
  GpuBusySampler running(src, std::chrono::milliseconds(1));
  running.Start();
}

TEST(NvmlSource, AMissingLibraryIsUnavailableSayingWhy) {
  auto s = OpenNvmlUtilization("0000:19:00.0", "/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(s.status().message().find("NVML unavailable: cannot load "
                                      "/nonexistent/libnvidia-ml.so.1"),
            std::string::npos)
      << s.status().ToString();
  EXPECT_NE(s.status().message().find("NVIDIA driver"), std::string::npos);
}

TEST(NvmlSource, ALibraryWithoutTheEntryPointsIsUnavailable) {
  auto s = OpenNvmlUtilization("0000:19:00.0", "libm.so.6");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(s.status().message().find("libm.so.6 has no nvmlInit_v2"), std::string::npos)
      << s.status().ToString();
}

// The stand-in library, held open by the test (so its counters outlive the sources' own
// handles), and its nvmlShutdown counter.
class FakeNvml {
 public:
  FakeNvml() : lib_(dlopen(NW_FAKE_NVML, RTLD_NOW | RTLD_LOCAL)) {
    EXPECT_NE(lib_, nullptr) << dlerror();
  }
  ~FakeNvml() {
    if (lib_ != nullptr) dlclose(lib_);
  }
  FakeNvml(const FakeNvml&) = delete;
  FakeNvml& operator=(const FakeNvml&) = delete;
  int Shutdowns() const {
    auto fn =
        lib_ != nullptr ? reinterpret_cast<int (*)()>(dlsym(lib_, "fake_nvml_shutdowns")) : nullptr;
    return fn != nullptr ? fn() : -1;
  }

 private:
  void* lib_;
};

TEST(NvmlSource, ReadsUtilizationSamplesThroughDlopen) {
  FakeNvml fake;
  const int shutdowns = fake.Shutdowns();
  {
    auto s = OpenNvmlUtilization("0000:19:00.0", NW_FAKE_NVML);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ((*s)->Name(), "NVML GPU 0000:19:00.0");
    auto all = (*s)->SamplesSince(0);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    ASSERT_EQ(all->size(), 4u);
    EXPECT_EQ((*all)[0].timestamp_us, 1000u);
    EXPECT_DOUBLE_EQ((*all)[0].busy, 0.10);  // percent -> fraction
    EXPECT_DOUBLE_EQ((*all)[2].busy, 1.0);
    auto later = (*s)->SamplesSince(2000);
    ASSERT_TRUE(later.ok());
    ASSERT_EQ(later->size(), 2u);
    EXPECT_EQ((*later)[0].timestamp_us, 3000u);
    auto none = (*s)->SamplesSince(4000);  // NVML_ERROR_NOT_FOUND: no new sample, not an error
    ASSERT_TRUE(none.ok()) << none.status().ToString();
    EXPECT_TRUE(none->empty());
    // Through the sampler: (50 + 100 + 0) / 3 after the first sample.
    GpuBusySampler sampler(**s);
    const uint64_t end = sampler.Mark();
    EXPECT_EQ(end, 4000u);
    EXPECT_DOUBLE_EQ(*sampler.BusyBetween(1000, end), 0.5);
    EXPECT_EQ(fake.Shutdowns(), shutdowns);
  }
  EXPECT_EQ(fake.Shutdowns(), shutdowns + 1);  // RAII: nvmlShutdown once
}

TEST(NvmlSource, AnUnknownBusIdIsUnavailableAndShutsNvmlDown) {
  FakeNvml fake;
  const int shutdowns = fake.Shutdowns();
  auto s = OpenNvmlUtilization("0000:AA:00.0", NW_FAKE_NVML);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(s.status().message().find("no GPU with PCI bus id '0000:AA:00.0': Not Found"),
            std::string::npos)
      << s.status().ToString();
  EXPECT_EQ(fake.Shutdowns(), shutdowns + 1);
}

// The real thing, for a machine with an NVIDIA GPU and a CUDA build (the lead's H200):
// CUDA device 0's PCI bus id, NVML's samples over about two seconds, a fraction in [0, 1].
TEST(NvmlSource, RealGpuWhereThereIsOne) {
  auto s = OpenGpuUtilization(0);
  if (!s.ok()) GTEST_SKIP() << "no NVML GPU here: " << s.status().ToString();
  GpuBusySampler sampler(**s, std::chrono::milliseconds(100));
  const uint64_t from = sampler.Mark();
  sampler.Start();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const uint64_t to = sampler.Mark();
  sampler.Stop();
  EXPECT_FALSE(sampler.TakeFirstError().has_value());
  EXPECT_GT(to, from) << "no NVML utilization sample in 2 s";
  const auto busy = sampler.BusyBetween(from, to);
  ASSERT_TRUE(busy.has_value());
  EXPECT_GE(*busy, 0.0);
  EXPECT_LE(*busy, 1.0);
  std::printf("%s: busy %.3f over 2 s (%lld samples)\n", sampler.Name().c_str(), *busy,
              static_cast<long long>(sampler.SamplesBetween(from, to)));
}

}  // namespace
}  // namespace nw
