// /metrics: the Prometheus text exposition built from constructed inputs, checked line by line
// and with a real parser (promtool check metrics, Debian's prometheus package; scripts/setup.sh
// installs it).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dashboard/prometheus.h"
#include "tests/dashboard/dashboard_test_util.h"
#include "tests/db/campaign_fixture.h"

namespace nw::dashboard {
namespace {

using dashboard_test::Promtool;
using testing_db::TempDir;

std::vector<CampaignMetrics> Campaigns() {
  CampaignMetrics c;
  c.name = "nightly \"fp8\" \\ sweep\nsecond line";
  c.progress = CampaignProgress{10, 3, 2, 4, 1, 3, 1, 0};
  c.outcomes = {
      {"topk=16 precision=fp32 backend=cpu task=niah-single haystack=noise", Outcome::kPass, 3},
      {"topk=16 precision=fp32 backend=cpu task=niah-single haystack=noise", Outcome::kMiss, 1}};
  return {c};
}

LiveMetricsSnapshot Live() {
  LiveMetrics m;
  m.ObserveDispatch(0.0004);  // first bucket
  m.ObserveDispatch(0.003);   // le=0.005
  m.ObserveDispatch(30);      // only +Inf
  m.ObserveCommit(0.02);
  m.ObserveDbWrite("commit_results", 0.002);
  m.ObserveDbWrite("record_attempts", 0.001);
  m.CountResult("pass");
  m.CountResult("pass");
  m.CountResult("miss");
  LiveWorker cpu{"w-cpu", "host-a", "cpu", {"cpu"},      2,           3,
                 false,   1500,     "",    std::nullopt, std::nullopt};
  // The GPU worker's last reported busy fraction (NVML, HEARTBEAT): 0.875.
  LiveWorker gpu{"w-gpu", "host-b", "NVIDIA H200", {"cuda"},      1,
                 1,       false,    200,           "NVIDIA H200", int64_t{143771} * 1024 * 1024,
                 0.875};
  // A GPU worker that cannot measure its GPU: slot occupancy only.
  LiveWorker blind{"w-blind", "host-c", "NVIDIA H200", {"cuda"},     2,           1,
                   false,     100,      "NVIDIA H200", std::nullopt, std::nullopt};
  m.Publish({cpu, gpu, blind}, {{"retried", 2}, {"workers_lost", 1}}, 10'000);
  return m.Take();
}

TEST(Prometheus, DatabaseFamiliesWithEscapedLabels) {
  const std::string text = RenderPrometheus(Campaigns(), nullptr, 10'000);
  const std::string label = "campaign=\"nightly \\\"fp8\\\" \\\\ sweep\\nsecond line\"";
  EXPECT_NE(text.find("nw_campaign_jobs{" + label + ",state=\"queued\"} 3\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("nw_campaign_jobs{" + label + ",state=\"done\"} 4\n"), std::string::npos);
  EXPECT_NE(text.find("nw_campaign_size_jobs{" + label + "} 10\n"), std::string::npos);
  EXPECT_NE(text.find("nw_campaign_results{" + label +
                      ",config=\"topk=16 precision=fp32 backend=cpu task=niah-single "
                      "haystack=noise\",outcome=\"miss\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("nw_coordinator_live 0\n"), std::string::npos);
  // Without a coordinator in the process there are no live families.
  EXPECT_EQ(text.find("nw_dispatch_seconds"), std::string::npos);
  EXPECT_EQ(text.find("nw_workers_connected"), std::string::npos);
}

TEST(Prometheus, LiveHistogramsCountersAndWorkers) {
  const LiveMetricsSnapshot live = Live();
  const std::string text = RenderPrometheus(Campaigns(), &live, 10'500);
  // Cumulative buckets: 1 at 0.0005, 2 from 0.005 on, 3 only at +Inf.
  EXPECT_NE(text.find("nw_dispatch_seconds_bucket{le=\"0.0005\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("nw_dispatch_seconds_bucket{le=\"0.0025\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("nw_dispatch_seconds_bucket{le=\"0.005\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("nw_dispatch_seconds_bucket{le=\"10\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("nw_dispatch_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("nw_dispatch_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(text.find("nw_sqlite_write_seconds_count{op=\"commit_results\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("nw_results_committed_total{outcome=\"pass\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("nw_coordinator_events_total{event=\"retried\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("nw_workers_connected 3\n"), std::string::npos);
  EXPECT_NE(text.find("nw_worker_slots{worker=\"w-cpu\",host=\"host-a\",device=\"cpu\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("nw_worker_leases{worker=\"w-cpu\"} 3\n"), std::string::npos);
  // Age when published plus the time since: 1.5 s + 0.5 s.
  EXPECT_NE(text.find("nw_worker_heartbeat_age_seconds{worker=\"w-cpu\"} 2\n"), std::string::npos);
  // GPU rows only for the GPU workers; slot occupancy capped at 1; the GPU's busy fraction only
  // where the worker measured it.
  EXPECT_NE(text.find("nw_gpu_slot_occupancy_fraction{worker=\"w-gpu\",gpu=\"NVIDIA H200\"} 1\n"),
            std::string::npos);
  EXPECT_NE(
      text.find("nw_gpu_slot_occupancy_fraction{worker=\"w-blind\",gpu=\"NVIDIA H200\"} 0.5\n"),
      std::string::npos);
  EXPECT_NE(text.find("nw_gpu_busy_fraction{worker=\"w-gpu\",gpu=\"NVIDIA H200\"} 0.875\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("nw_gpu_busy_fraction{worker=\"w-blind\""), std::string::npos);
  EXPECT_NE(text.find("nw_gpu_memory_total_bytes{worker=\"w-gpu\",gpu=\"NVIDIA H200\"} "
                      "150754820096\n"),
            std::string::npos);
  EXPECT_EQ(text.find("nw_gpu_busy_fraction{worker=\"w-cpu\""), std::string::npos);
  LiveWorker over;
  over.slots = 2;
  over.busy = 5;
  EXPECT_EQ(BusyFraction(over), 1.0);
  over.busy = 1;
  EXPECT_EQ(BusyFraction(over), 0.5);
}

TEST(Prometheus, PromtoolAcceptsTheExposition) {
  TempDir dir;
  const LiveMetricsSnapshot live = Live();
  for (const std::string& text :
       {RenderPrometheus(Campaigns(), &live, 10'500),
        RenderPrometheus(Campaigns(), nullptr, 10'500), RenderPrometheus({}, nullptr, 0)}) {
    auto [rc, out] = Promtool(text, dir.path());
    if (rc == -1) GTEST_SKIP() << out << " (scripts/setup.sh installs Debian's prometheus)";
    EXPECT_EQ(rc, 0) << out << "\n" << text;
  }
}

// The parser is strict enough to catch what this file guards against: an unescaped quote in a
// label value, and a gauge named like a counter.
TEST(Prometheus, PromtoolRejectsBrokenExpositions) {
  TempDir dir;
  auto [rc, out] = Promtool("# TYPE x gauge\nx{a=\"b\"c\"} 1\n", dir.path());
  if (rc == -1) GTEST_SKIP() << out;
  EXPECT_NE(rc, 0) << out;
  auto [rc2, out2] = Promtool("# HELP x_total a\n# TYPE x_total gauge\nx_total 1\n", dir.path());
  EXPECT_NE(rc2, 0) << out2;
}

}  // namespace
}  // namespace nw::dashboard
