// Batched decode on the CPU reference backend: one decode step for B sequences at once, where
// every dense linear layer (attention projections, wo_a/wo_b, the MoE gate and experts, the head)
// runs as one [B, d] x [d, n] product that reads each weight row once per step instead of B
// times; attention, the indexer, the compressors and the KV caches stay per sequence.
//
// Results are bit-identical to running each sequence alone: every output value is computed by the
// same code with the same summation order (sequence_impl.h, kernels/cpu/ops.h LinearRows), so a
// row never depends on the other rows of the batch.
// Thread-safety: the sequences of one call are used by the calling thread only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/weights.h"
#include "engine/cpu/generate.h"
#include "engine/cpu/sequence.h"
#include "engine/engine.h"

namespace nw::cpu {

/// Runs tokens[i] through seqs[i] (distinct sequences of one config) and puts the logits of
/// sequence i in row i of `logits` ([B, V]). Sequences reading the same weights run as one pass;
/// sequences over other weights (another precision format) form their own pass, and a sequence
/// with tp_ranks > 1 runs alone. Every sequence is checked (capacity, token id) before any runs;
/// on an error no sequence has advanced.
Status DecodeBatch(std::span<Sequence* const> seqs, std::span<const int32_t> tokens,
                   std::vector<float>* logits);

/// Greedy generation of several requests together: each request is prefilled alone, then the
/// unfinished ones decode in batched steps (DecodeBatch) until each reaches a stop token or its
/// max_new_tokens. weights[i] is request i's weights (already in its format). Tokens, stop flags
/// and probes are bit-identical to Generate() of each request; prefill_ms is the request's own
/// prefill, decode_ms the time from the first batched step to its last token. Errors: as
/// Generate() for any request (nothing is returned then).
Result<std::vector<GenerateResult>> GenerateBatch(const ModelConfig& cfg,
                                                  std::span<const ModelWeights* const> weights,
                                                  std::span<const GenerateRequest> requests,
                                                  const BackendOptions& backend);

}  // namespace nw::cpu
