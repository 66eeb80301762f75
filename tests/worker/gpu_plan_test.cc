// GPU workers (worker/gpu_plan.h): parsing nvidia-smi, the refusals (no CUDA, no CUDA engine
// backend, no GPU, no such GPU), the selection of --gpu/--gpus, and the per-GPU fan-out, all on
// injected device lists. The refusal of the real binary: tests/dist/cli_dist_test.cc.
#include "worker/gpu_plan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/engine.h"

namespace nw {
namespace {

// Recorded on an H200 host with the query `nw worker` runs (kNvidiaSmiGpuQuery).
constexpr const char* kOneH200 = "0, NVIDIA H200, 143771\n";

std::vector<GpuDevice> FourGpus() {
  auto d = ParseNvidiaSmiGpus(
      "0, NVIDIA H200, 143771\n1, NVIDIA H200, 143771\n2, NVIDIA H200, 143771\n"
      "3, NVIDIA H200, 143771\n");
  EXPECT_TRUE(d.ok());
  return d.ok() ? *d : std::vector<GpuDevice>();
}

GpuSupport FutureCudaBuild() {
  return GpuSupport{true, {"cpu", "cpu-paged", "cuda", "cuda-paged"}};
}

TEST(GpuPlan, ParsesNvidiaSmi) {
  auto one = ParseNvidiaSmiGpus(kOneH200);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0], (GpuDevice{0, "NVIDIA H200", 143771}));
  // A name with a comma, CRLF, blank lines; empty output is no GPU.
  auto odd = ParseNvidiaSmiGpus("\n3, Tesla V100-SXM2-32GB, rev 2, 32510\r\n\n");
  ASSERT_TRUE(odd.ok()) << odd.status().ToString();
  ASSERT_EQ(odd->size(), 1u);
  EXPECT_EQ((*odd)[0], (GpuDevice{3, "Tesla V100-SXM2-32GB, rev 2", 32510}));
  EXPECT_TRUE(ParseNvidiaSmiGpus("").value().empty());
  for (const char* bad :
       {"No devices were found", "0, H200", "x, H200, 1", "0, H200, lots", "-1, H200, 5"}) {
    auto r = ParseNvidiaSmiGpus(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(bad), std::string::npos);
    }
  }
}

TEST(GpuPlan, RefusesWithoutCudaWithoutACudaBackendOrWithoutAGpu) {
  const std::vector<GpuDevice> one = ParseNvidiaSmiGpus(kOneH200).value();
  Status no_cuda = CheckGpuWorkerSupport(GpuSupport{false, {"cpu", "cpu-paged"}}, one);
  EXPECT_EQ(no_cuda.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(no_cuda.message().find("built without CUDA"), std::string::npos) << no_cuda.message();
  EXPECT_NE(no_cuda.message().find("cannot run jobs on a GPU"), std::string::npos);
  EXPECT_NE(no_cuda.message().find("cpu, cpu-paged"), std::string::npos);
  // A CUDA build where no cuda* backend can run (no usable GPU): the kernels alone run no job.
  Status no_backend = CheckGpuWorkerSupport(GpuSupport{true, {"cpu", "cpu-paged"}}, one);
  EXPECT_EQ(no_backend.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(no_backend.message().find("no cuda* engine backend can run here"), std::string::npos)
      << no_backend.message();
  EXPECT_NE(no_backend.message().find("cannot run jobs on a GPU"), std::string::npos);
  Status no_gpu = CheckGpuWorkerSupport(FutureCudaBuild(), {});
  EXPECT_EQ(no_gpu.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(no_gpu.message().find("no GPU found"), std::string::npos) << no_gpu.message();
  EXPECT_TRUE(CheckGpuWorkerSupport(FutureCudaBuild(), one).ok());
  EXPECT_EQ(GpuBackends(FutureCudaBuild()), (std::vector<std::string>{"cuda", "cuda-paged"}));
}

TEST(GpuPlan, ThisBuildIsRefusedWhileTheEngineHasNoCudaBackend) {
  const GpuSupport here = ThisBuildGpuSupport();
  EXPECT_EQ(here.engine_backends, AvailableBackends());
  if (GpuBackends(here).empty()) {
    // Whatever the GPUs, this build refuses (never a silent CPU fallback).
    EXPECT_FALSE(CheckGpuWorkerSupport(here, FourGpus()).ok());
  }
}

TEST(GpuPlan, SelectsGpus) {
  const std::vector<GpuDevice> four = FourGpus();
  EXPECT_EQ(SelectGpus(2, "", four).value(), (std::vector<int>{2}));
  EXPECT_EQ(SelectGpus(std::nullopt, "all", four).value(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(SelectGpus(std::nullopt, "3,1", four).value(), (std::vector<int>{3, 1}));
  EXPECT_EQ(SelectGpus(std::nullopt, " 0 , 2", four).value(), (std::vector<int>{0, 2}));
  auto missing = SelectGpus(7, "", four);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no GPU 7 (GPUs here: 0, 1, 2, 3)"), std::string::npos)
      << missing.status().message();
  EXPECT_FALSE(SelectGpus(std::nullopt, "0,4", four).ok());
  auto twice = SelectGpus(std::nullopt, "1,1", four);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("listed twice"), std::string::npos);
  for (const char* bad : {"", "some", "0,", ",1", "0;1", "-1", "1.5"}) {
    auto r = SelectGpus(std::nullopt, bad, four);
    EXPECT_FALSE(r.ok()) << "'" << bad << "'";
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
  EXPECT_FALSE(SelectGpus(std::nullopt, "all", {}).ok());
  EXPECT_FALSE(SelectGpus(1, "all", four).ok());  // both flags
}

TEST(GpuPlan, OneWorkerProcessPerGpu) {
  const std::vector<int> gpus = SelectGpus(std::nullopt, "all", FourGpus()).value();
  const std::vector<std::string> tail = {"--coordinator", "tcp://c:5555", "--slots", "2"};
  auto plan = PlanGpuWorkers("nw", {"--db", "x.db"}, gpus, "", tail);
  ASSERT_EQ(plan.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(plan[i].gpu, i);
    EXPECT_EQ(plan[i].argv,
              (std::vector<std::string>{"nw", "--db", "x.db", "worker", "--gpu", std::to_string(i),
                                        "--coordinator", "tcp://c:5555", "--slots", "2"}));
  }
  // With an id, each child gets its own, derived from it.
  auto named = PlanGpuWorkers("nw", {}, {1, 3}, "host-a", {});
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].argv,
            (std::vector<std::string>{"nw", "worker", "--gpu", "1", "--id", "host-a-gpu1"}));
  EXPECT_EQ(named[1].argv,
            (std::vector<std::string>{"nw", "worker", "--gpu", "3", "--id", "host-a-gpu3"}));
  EXPECT_TRUE(PlanGpuWorkers("nw", {}, {}, "", {}).empty());
}

TEST(GpuPlan, EachWorkerSeesOnlyItsGpuInNvidiaSmiOrder) {
  const auto env = GpuWorkerEnvironment(3);
  ASSERT_EQ(env.size(), 2u);
  EXPECT_EQ(env[0], (std::pair<std::string, std::string>{"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}));
  EXPECT_EQ(env[1], (std::pair<std::string, std::string>{"CUDA_VISIBLE_DEVICES", "3"}));
}

}  // namespace
}  // namespace nw
