// The RAII NCCL communicator (engine/parallel/nccl/). Built for real only with -DNW_CUDA=ON and
// NCCL found (NW_HAVE_NCCL); otherwise the test reports itself skipped. The two-rank all-reduce
// needs 2 visible GPUs and skips without them.
#include <gtest/gtest.h>

#ifdef NW_HAVE_NCCL
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "engine/parallel/nccl/communicator.h"
#endif

namespace {

#ifdef NW_HAVE_NCCL

struct CudaFree {
  void operator()(float* p) const { cudaFree(p); }
};
using DeviceBuffer = std::unique_ptr<float, CudaFree>;

DeviceBuffer Upload(int device, const std::vector<float>& host) {
  EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(float)), cudaSuccess);
  DeviceBuffer b(static_cast<float*>(p));
  EXPECT_EQ(cudaMemcpy(b.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  return b;
}

std::vector<float> Download(int device, const DeviceBuffer& b, size_t n) {
  std::vector<float> host(n);
  EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(host.data(), b.get(), n * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
}

TEST(NcclCommTest, RejectsInvisibleDevices) {
  const std::vector<int> none;
  EXPECT_FALSE(nw::parallel::NcclComm::InitAll(none).ok());
  const std::vector<int> bad = {nw::parallel::VisibleCudaDevices() + 3};
  EXPECT_FALSE(nw::parallel::NcclComm::InitAll(bad).ok());
}

TEST(NcclCommTest, OneRankAllReduceIsIdentity) {
  if (nw::parallel::VisibleCudaDevices() < 1) GTEST_SKIP() << "no CUDA device";
  const std::vector<int> devices = {0};
  auto comms = nw::parallel::NcclComm::InitAll(devices);
  ASSERT_TRUE(comms.ok()) << comms.status().ToString();
  const std::vector<float> host = {1.5f, -2.0f, 3.25f};
  DeviceBuffer b = Upload(0, host);
  float* const ptrs[] = {b.get()};
  ASSERT_TRUE(nw::parallel::AllReduceSumF32(*comms, ptrs, 3).ok());
  EXPECT_EQ(Download(0, b, 3), host);
}

TEST(NcclCommTest, TwoRanksSum) {
  if (nw::parallel::VisibleCudaDevices() < 2) GTEST_SKIP() << "needs 2 GPUs";
  const std::vector<int> devices = {0, 1};
  auto comms = nw::parallel::NcclComm::InitAll(devices);
  ASSERT_TRUE(comms.ok()) << comms.status().ToString();
  const size_t n = 1 << 16;
  std::vector<float> a(n), c(n), want(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 97);
    c[i] = 0.5f * static_cast<float>(i % 13);
    want[i] = a[i] + c[i];
  }
  DeviceBuffer b0 = Upload(0, a), b1 = Upload(1, c);
  float* const ptrs[] = {b0.get(), b1.get()};
  ASSERT_TRUE(nw::parallel::AllReduceSumF32(*comms, ptrs, static_cast<int64_t>(n)).ok());
  EXPECT_EQ(Download(0, b0, n), want);
  EXPECT_EQ(Download(1, b1, n), want);
}

#else

TEST(NcclCommTest, NotBuilt) {
  GTEST_SKIP() << "built without NCCL (needs -DNW_CUDA=ON and nccl.h/libnccl)";
}

#endif

}  // namespace
