// GPU busy as users see it, through the real `nw` binary: a campaign run in-process
// (RunEmbedded) whose GPU worker has a fake utilization source in place of NVML, then
// `nw report` (text, Markdown, JSON, HTML), `nw status` and `nw query` on its database; a CPU
// campaign in the same database shows nothing about GPU busy; `nw gpu-busy` says clearly when
// NVML cannot be loaded.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compose/embedded_run.h"
#include "db/store.h"
#include "tests/support/gpu_busy_fakes.h"
#include "tests/support/shell.h"
#include "tests/support/temp_dir.h"

namespace nw {
namespace {

using test_support::AnswerExecutor;
using test_support::BusySpec;
using test_support::CommandResult;
using test_support::Sh;
using test_support::SteadySource;

class GpuBusyCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = dir_.File("nw.db").string();
    auto s = Store::Open(db_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    Store& store = **s;
    // "gpu": 3 jobs on the GPU worker (busy 0.75) and 2 on the CPU worker; "cpu": CPU only.
    for (const std::string name : {"gpu", "cpu"}) {
      auto id = store.UpsertCampaign(name, name + ".yaml", "", 1000);
      ASSERT_TRUE(id.ok());
      std::vector<JobSpec> specs;
      for (int i = 0; i < 3 && name == "gpu"; ++i) specs.push_back(BusySpec(i, "cuda"));
      for (int i = 0; i < 2; ++i) specs.push_back(BusySpec(i, "cpu", name == "gpu" ? 256 : 512));
      ASSERT_TRUE(store.AddJobs(*id, specs, 1000).ok());
      std::vector<std::unique_ptr<JobExecutor>> ex;
      ex.push_back(std::make_unique<AnswerExecutor>("cuda"));
      ex.push_back(std::make_unique<AnswerExecutor>("cpu"));
      RunOptions o;
      o.scheduler.heartbeat_interval_ms = 20;
      o.result_batch_ms = 5;
      o.gpu_busy_source = [](size_t first) -> std::unique_ptr<GpuUtilizationSource> {
        return first == 0 ? std::make_unique<SteadySource>(0.75) : nullptr;
      };
      auto summary = RunEmbedded(store, *id, std::move(ex), o);
      ASSERT_TRUE(summary.ok()) << summary.status().ToString();
      ASSERT_EQ(summary->done, static_cast<int64_t>(specs.size()));
    }
    // The workers' last heartbeat reports (written by the coordinator on a HEARTBEAT with
    // gpu_busy, tests/coordinator/gpu_busy_run_test.cc): one GPU worker, one CPU worker.
    WorkerRecord gpu;
    gpu.id = "gpu-worker";
    gpu.device = "NVIDIA H200";
    gpu.first_seen_ms = 1;
    gpu.last_seen_ms = 2;
    gpu.state = "active";
    gpu.gpu_busy = 0.913;
    gpu.gpu_busy_ms = 10'000;
    gpu.gpu_busy_at_ms = 2;
    ASSERT_TRUE(store.UpsertWorker(gpu).ok());
    WorkerRecord cpu = gpu;
    cpu.id = "cpu-worker";
    cpu.device = "cpu";
    cpu.gpu_busy.reset();
    ASSERT_TRUE(store.UpsertWorker(cpu).ok());
  }
  CommandResult Nw(const std::string& args) {
    return Sh(std::string(NW_BIN) + " --db " + db_ + " " + args);
  }

  test_support::TempDir dir_{"gpu-busy-cli"};
  std::string db_;
};

TEST_F(GpuBusyCliTest, ReportShowsTheCampaignsGpuBusyOnlyWhenKnown) {
  CommandResult text = Nw("report gpu");
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("GPU busy: 75% while the 3 jobs measured on a GPU ran (NVML, weighted "
                          "by run time)\n"),
            std::string::npos)
      << text.out;
  CommandResult md = Nw("report gpu --format markdown");
  ASSERT_EQ(md.exit_code, 0) << md.out;
  EXPECT_NE(md.out.find(". GPU busy: 75% while the 3 jobs"), std::string::npos) << md.out;
  CommandResult html = Nw("report gpu --format html");
  ASSERT_EQ(html.exit_code, 0) << html.out;
  EXPECT_NE(html.out.find("GPU busy: 75% while the 3 jobs"), std::string::npos);
  CommandResult js = Nw("report gpu --format json");
  ASSERT_EQ(js.exit_code, 0) << js.out;
  const auto j = nlohmann::json::parse(js.out);
  ASSERT_TRUE(j.contains("gpu_busy")) << js.out;
  EXPECT_DOUBLE_EQ(j["gpu_busy"]["fraction"].get<double>(), 0.75);
  EXPECT_EQ(j["gpu_busy"]["results"].get<int64_t>(), 3);

  // A campaign without a measured job says nothing about GPU busy, in any format.
  for (const std::string format : {"text", "markdown", "html", "json"}) {
    CommandResult cpu = Nw("report cpu --format " + format);
    ASSERT_EQ(cpu.exit_code, 0) << cpu.out;
    EXPECT_EQ(cpu.out.find("GPU busy"), std::string::npos) << format << "\n" << cpu.out;
    EXPECT_EQ(cpu.out.find("gpu_busy"), std::string::npos) << format << "\n" << cpu.out;
  }
}

TEST_F(GpuBusyCliTest, ResultsTableHasTheValueOrNull) {
  CommandResult q =
      Nw("query --format csv \"SELECT backend, COUNT(*), COUNT(gpu_busy), MIN(gpu_busy), "
         "MAX(gpu_busy) FROM v_results GROUP BY backend ORDER BY backend\"");
  ASSERT_EQ(q.exit_code, 0) << q.out;
  EXPECT_NE(q.out.find("cpu,4,0,,\n"), std::string::npos) << q.out;  // NULL, never 0
  EXPECT_NE(q.out.find("cuda,3,3,0.75,0.75\n"), std::string::npos) << q.out;
}

TEST_F(GpuBusyCliTest, StatusShowsEachGpuWorkersLastInterval) {
  CommandResult st = Nw("status");
  ASSERT_EQ(st.exit_code, 0) << st.out;
  std::string gpu_line, cpu_line;
  size_t pos = 0;
  while (pos < st.out.size()) {
    const size_t end = st.out.find('\n', pos);
    const std::string line = st.out.substr(pos, end == std::string::npos ? end : end - pos);
    if (line.find("gpu-worker") != std::string::npos) gpu_line = line;
    if (line.find("cpu-worker") != std::string::npos) cpu_line = line;
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  EXPECT_NE(gpu_line.find("GPU busy 91.3% over 10s, "), std::string::npos) << st.out;
  EXPECT_NE(gpu_line.find(" ago"), std::string::npos) << st.out;
  ASSERT_FALSE(cpu_line.empty()) << st.out;
  EXPECT_EQ(cpu_line.find("GPU busy"), std::string::npos) << st.out;
}

TEST(GpuBusyCommand, SaysWhyWhenNvmlCannotBeLoaded) {
  CommandResult r = Sh(std::string(NW_BIN) +
                       " gpu-busy --pci-bus-id 0000:19:00.0 --nvml-library "
                       "/nonexistent/libnvidia-ml.so.1 --seconds 0.1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("nw gpu-busy: NVML unavailable: cannot load "
                       "/nonexistent/libnvidia-ml.so.1"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace nw
