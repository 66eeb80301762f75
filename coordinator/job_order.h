// The order in which a campaign's runnable jobs enter the scheduler (which then leases, within a
// campaign, by job priority, the worker's last model, and this order): round-robin over prompt
// lengths, each length's jobs in their own order. A campaign expands each length's jobs together
// (needle positions and trials nest inside the length axis, docs/campaigns.md), so without this
// its shortest prompts would all run first and its longest last; interleaved, a GPU worker's slots
// run long and short jobs side by side, and the short jobs' host-side work (launches, decode-step
// syncs) overlaps the long jobs' kernels instead of leaving the GPU idle (docs/throughput.md, GPU
// busy). Neither kind waits for the other. Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <vector>

#include "db/store.h"

namespace nw {

/// Indices into `jobs`: the first job of each context length (lengths in order of first
/// appearance), then the second of each, and so on.
std::vector<size_t> InterleaveByLength(const std::vector<JobRecord>& jobs);

}  // namespace nw
