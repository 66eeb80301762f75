// Simulated tensor parallelism on the CPU reference backend: R rank-local computations in one
// process, with an explicit all-reduce (a sum in fixed rank order, so results are deterministic).
//
// The rank-local work runs inside the CPU forward pass (SequenceOptions::tp_ranks, sequence.h):
// per layer each rank attends with its heads, applies its wo_a groups and its wo_b columns, scores
// its index heads and runs its routed experts; the partials are all-reduced before top-k (index
// scores) and before the residual (attention and MoE outputs). Everything replicated is computed
// once (identical on every rank). This file checks the plan and builds such a Sequence.
// Thread-safety: as Sequence.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/weights.h"
#include "engine/cpu/sequence.h"
#include "engine/parallel/partition.h"

namespace nw::parallel {

/// A Sequence that runs `plan` (validated against cfg) as simulated ranks.
Result<cpu::Sequence> CreateTpSequence(const ModelConfig& cfg, const ModelWeights& weights,
                                       cpu::SequenceOptions options, const PartitionPlan& plan);

/// The all-reduce of the simulation: out[i] = ((p0[i] + p1[i]) + p2[i]) + ... in rank order.
/// Every partial must have out's size.
Status AllReduceSum(std::span<const std::vector<float>> partials, std::vector<float>* out);

}  // namespace nw::parallel
