// GPU busy end to end on the CPU, with a fake utilization source in place of NVML: a GPU
// worker's results carry the busy fraction over each job into table results, its heartbeats
// carry the last interval's into table workers and the dashboard's live metrics, the embedded
// run's summary has the busy fraction over the run, and a worker without a source leaves every
// one of them absent (NULL), never 0. Waiting is by polling with generous deadlines.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "compose/embedded_run.h"
#include "coordinator/server.h"
#include "dashboard/live_metrics.h"
#include "tests/support/gpu_busy_fakes.h"
#include "worker/worker.h"

namespace nw {
namespace {

constexpr int64_t kDeadlineMs = 20'000;

using test_support::AnswerExecutor;
using test_support::SteadySource;

class GpuBusyRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = std::filesystem::temp_directory_path() /
           ("nw-gpu-busy-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(dir_);
    auto s = Store::Open(dir_ / "nw.db");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    auto id = store_->UpsertCampaign("busy", "busy.yaml", "", 1);
    ASSERT_TRUE(id.ok());
    campaign_ = *id;
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // n jobs on the GPU backend "cuda" and n on "cpu"; returns {cuda keys, cpu keys}.
  std::pair<std::vector<std::string>, std::vector<std::string>> AddJobs(int n) {
    std::vector<JobSpec> specs;
    std::vector<std::string> gpu, cpu;
    for (int i = 0; i < n; ++i) {
      specs.push_back(test_support::BusySpec(i, "cuda"));
      gpu.push_back(specs.back().Key());
      specs.push_back(test_support::BusySpec(i, "cpu"));
      cpu.push_back(specs.back().Key());
    }
    EXPECT_TRUE(store_->AddJobs(campaign_, specs, 2).ok());
    return {gpu, cpu};
  }
  static SchedulerOptions Fast() {
    SchedulerOptions o;
    o.heartbeat_interval_ms = 20;
    o.lease_ms = 60'000;
    return o;
  }

  std::filesystem::path dir_;
  std::unique_ptr<Store> store_;
  int64_t campaign_ = 0;
};

TEST_F(GpuBusyRunTest, GpuWorkersResultsCarryItAndCpuWorkersStayNull) {
  const auto [gpu_keys, cpu_keys] = AddJobs(5);
  std::vector<std::unique_ptr<JobExecutor>> ex;
  ex.push_back(std::make_unique<AnswerExecutor>("cuda"));  // worker embedded-0: the GPU one
  ex.push_back(std::make_unique<AnswerExecutor>("cpu"));   // worker embedded-1
  RunOptions o;
  o.scheduler = Fast();
  o.result_batch_ms = 5;
  std::vector<size_t> asked;
  o.gpu_busy_source = [&asked](size_t first) -> std::unique_ptr<GpuUtilizationSource> {
    asked.push_back(first);
    if (first != 0) return nullptr;
    return std::make_unique<SteadySource>(0.75);
  };
  auto summary = RunEmbedded(*store_, campaign_, std::move(ex), o);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->done, 10);
  EXPECT_EQ(asked, (std::vector<size_t>{0, 1}));  // once per worker, by its first executor

  auto results = store_->Results(campaign_);
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  ASSERT_EQ(results->size(), 10u);
  std::map<std::string, std::optional<double>> busy;
  for (const JobResult& r : *results) busy[r.job_key] = r.gpu_busy;
  for (const std::string& k : gpu_keys) {
    ASSERT_TRUE(busy.at(k).has_value()) << k;
    EXPECT_DOUBLE_EQ(*busy.at(k), 0.75);
  }
  for (const std::string& k : cpu_keys) EXPECT_FALSE(busy.at(k).has_value()) << k;

  // The campaign's figure is over the GPU jobs only.
  auto campaign = store_->CampaignGpuBusy(campaign_);
  ASSERT_TRUE(campaign.ok()) << campaign.status().ToString();
  ASSERT_TRUE(campaign->has_value());
  EXPECT_EQ((*campaign)->results, 5);
  EXPECT_DOUBLE_EQ((*campaign)->gpu_busy, 0.75);

  // The run's summary: the GPU worker only.
  ASSERT_EQ(summary->gpu_busy.size(), 1u);
  EXPECT_EQ(summary->gpu_busy[0].worker_id, "embedded-0");
  EXPECT_EQ(summary->gpu_busy[0].gpu, "fake GPU");
  EXPECT_DOUBLE_EQ(summary->gpu_busy[0].busy, 0.75);
}

TEST_F(GpuBusyRunTest, WithoutAnySourceEverythingStaysAbsent) {
  AddJobs(2);
  std::vector<std::unique_ptr<JobExecutor>> ex;
  ex.push_back(std::make_unique<AnswerExecutor>("cuda"));
  ex.push_back(std::make_unique<AnswerExecutor>("cpu"));
  RunOptions o;
  o.scheduler = Fast();
  o.result_batch_ms = 5;
  auto summary = RunEmbedded(*store_, campaign_, std::move(ex), o);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_TRUE(summary->gpu_busy.empty());
  auto results = store_->Results(campaign_);
  ASSERT_TRUE(results.ok());
  for (const JobResult& r : *results) EXPECT_FALSE(r.gpu_busy.has_value()) << r.job_key;
  auto campaign = store_->CampaignGpuBusy(campaign_);
  ASSERT_TRUE(campaign.ok());
  EXPECT_FALSE(campaign->has_value());
  auto workers = store_->ListWorkers();
  ASSERT_TRUE(workers.ok());
  ASSERT_EQ(workers->size(), 2u);
  for (const WorkerRecord& w : *workers) EXPECT_FALSE(w.gpu_busy.has_value()) << w.id;
}

TEST_F(GpuBusyRunTest, HeartbeatsPutTheLastIntervalInTableWorkersAndTheLiveMetrics) {
  AddJobs(1);
  zmq::context_t ctx;
  SystemClock clock;
  LiveMetrics metrics;
  const std::string endpoint = "inproc://gpu-busy-heartbeats";
  ServerOptions so;
  so.endpoint = endpoint;
  so.scheduler = Fast();
  so.metrics = &metrics;
  // A daemon: it serves until stopped, so the workers stay registered and keep heartbeating.
  Server server(ctx, *store_, clock, so);
  Result<RunSummary> served = Status::Internal("not run");
  std::thread server_thread([&] { served = server.Serve(); });

  auto worker = [&](const std::string& id, std::unique_ptr<GpuUtilizationSource> source) {
    WorkerOptions wo;
    wo.endpoint = endpoint;
    wo.worker_id = id;
    wo.heartbeat_interval_ms = 20;
    wo.gpu_busy_report_ms = 1;
    std::vector<std::unique_ptr<JobExecutor>> ex;
    ex.push_back(std::make_unique<AnswerExecutor>("cpu"));
    return std::make_unique<Worker>(ctx, clock, wo, std::move(ex), std::move(source));
  };
  auto gpu = worker("gpu-worker", std::make_unique<SteadySource>(0.5));
  auto cpu = worker("cpu-worker", nullptr);
  std::thread gpu_thread([&] { EXPECT_TRUE(gpu->Run().ok()); });
  std::thread cpu_thread([&] { EXPECT_TRUE(cpu->Run().ok()); });

  // Table workers, read on a connection of its own while the coordinator writes.
  auto reader = Store::Open(dir_ / "nw.db", Store::Mode::kReadOnly);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  std::optional<WorkerRecord> gpu_row, cpu_row;
  std::optional<double> live_busy;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kDeadlineMs);
  while (std::chrono::steady_clock::now() < end && (!gpu_row || !cpu_row || !live_busy)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto rows = (*reader)->ListWorkers();
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    for (const WorkerRecord& w : *rows) {
      if (w.id == "gpu-worker" && w.gpu_busy) gpu_row = w;
      if (w.id == "cpu-worker") cpu_row = w;
    }
    for (const LiveWorker& w : metrics.Take().workers) {
      if (w.id == "gpu-worker" && w.gpu_busy) live_busy = w.gpu_busy;
    }
  }
  gpu->Stop();
  cpu->Stop();
  gpu_thread.join();
  cpu_thread.join();
  server.Stop();
  server_thread.join();
  ASSERT_TRUE(served.ok()) << served.status().ToString();

  ASSERT_TRUE(gpu_row.has_value()) << "no GPU busy report reached table workers";
  EXPECT_DOUBLE_EQ(*gpu_row->gpu_busy, 0.5);
  EXPECT_GT(gpu_row->gpu_busy_ms, 0);
  EXPECT_GT(gpu_row->gpu_busy_at_ms, 0);
  ASSERT_TRUE(cpu_row.has_value());
  EXPECT_FALSE(cpu_row->gpu_busy.has_value());  // never reported: NULL
  ASSERT_TRUE(live_busy.has_value());
  EXPECT_DOUBLE_EQ(*live_busy, 0.5);
  for (const LiveWorker& w : metrics.Take().workers) {
    if (w.id == "cpu-worker") {
      EXPECT_FALSE(w.gpu_busy.has_value());
    }
  }
  // The worker's own figure over its run.
  ASSERT_TRUE(gpu->Stats().gpu_busy.has_value());
  EXPECT_DOUBLE_EQ(*gpu->Stats().gpu_busy, 0.5);
  EXPECT_FALSE(cpu->Stats().gpu_busy.has_value());
}

}  // namespace
}  // namespace nw
