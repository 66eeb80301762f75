// cuda_backend_ops_test: the test-backend-ops program of the CUDA kernels.
//
//   cuda_backend_ops_test [gtest flags]      test mode: every kernel against the CPU reference
//                                            (--gtest_filter='CudaTopK.*' etc. picks ops)
//   cuda_backend_ops_test --perf [--filter=SUBSTR[|SUBSTR...]]
//                                            perf mode: times the kernels at DeepSeek-V4-Flash
//                                            shapes and prints achieved TFLOP/s and GB/s against
//                                            the H200 ceilings (docs/cuda.md)
// Without a GPU every test skips and perf mode exits 0 after saying so.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "kernels/cuda/common.h"
#include "tests/cuda/perf.h"

int main(int argc, char** argv) {
  bool perf = false;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--perf") == 0) perf = true;
    if (std::strncmp(argv[i], "--filter=", 9) == 0) filter = argv[i] + 9;
  }
  if (perf) {
    if (!nw::cuda::HasCudaDevice()) {
      std::printf("perf: no CUDA device, nothing timed\n");
      return 0;
    }
    return nw::cuda::testing::RunPerf(filter);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
