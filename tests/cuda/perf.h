// Perf mode of cuda_backend_ops_test: timings of the indexer-logits, top-k and sparse-attention
// kernels at DeepSeek-V4-Flash shapes (64 index heads x 128, top-512, 512-dim KV, 64 query heads).
#pragma once

#include <string>

namespace nw::cuda::testing {

/// Runs the perf cases whose name contains `filter`, or one of its '|'-separated parts (all when
/// empty); returns the exit code.
int RunPerf(const std::string& filter);

}  // namespace nw::cuda::testing
