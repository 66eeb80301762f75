// Batched decode on the CPU reference backend: one decode step for B sequences at once, where
// every dense linear layer (attention projections, wo_a/wo_b, the MoE gate and experts, the head)
// runs as one [B, d] x [d, n] product that reads each weight row once per step instead of B
// times; attention, the indexer, the compressors and the KV caches stay per sequence.
//
// Results are bit-identical to running each sequence alone: every output value is computed by the
// same code with the same summation order (sequence_impl.h, kernels/cpu/ops.h LinearRows), so a
// row never depends on the other rows of the batch.
// Greedy generation over batched steps is backend-agnostic (engine/generate.h GenerateBatch); the
// CPU backends (cpu_backend.h) run its steps through DecodeBatch.
// Thread-safety: the sequences of one call are used by the calling thread only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/weights.h"
#include "engine/cpu/sequence.h"
#include "engine/types.h"

namespace nw::cpu {

/// Runs tokens[i] through seqs[i] (distinct sequences of one config) and puts the logits of
/// sequence i in row i of `logits` ([B, V]). Sequences reading the same weights run as one pass;
/// sequences over other weights (another precision format) form their own pass, and a sequence
/// with tp_ranks > 1 runs alone. Every sequence is checked (capacity, token id) before any runs;
/// on an error no sequence has advanced.
Status DecodeBatch(std::span<Sequence* const> seqs, std::span<const int32_t> tokens,
                   std::vector<float>* logits);

}  // namespace nw::cpu
