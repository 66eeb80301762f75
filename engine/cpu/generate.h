// Greedy generation on the CPU reference backend: prefill, then step decode with argmax until a
// stop token or max_new_tokens, with optional indexer probes. The two CPU backends differ only in
// how they run the same math (see sequence.h):
//   "cpu"        contiguous KV, the whole prompt in one pass (ragged prefill);
//   "cpu-paged"  paged KV (pages of 64 entries), prefill in chunks of 256 tokens through the
//                paged cache and the paged indexer, as decode does.
// Both give bit-identical tokens, logits and probes. Cost on tiny config A (one core): a
// 4096-token prefill takes about 1.2 s of CPU, decode about 0.5 ms per token. The one-pass
// prefill keeps per-token activations of one layer for the whole prompt (about 12 KB per token
// for config A), so very long prompts need proportionally more memory than "cpu-paged".
// Thread-safety: pure function of its arguments (the weights are only read).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/weights.h"
#include "engine/cpu/sequence.h"
#include "engine/engine.h"

namespace nw::cpu {

struct BackendOptions {
  KvLayout layout = KvLayout::kContiguous;
  int64_t prefill_chunk = 0;  // 0 = whole prompt in one pass
};

inline constexpr int64_t kPagedPrefillChunk = 256;

/// "cpu" or "cpu-paged"; anything else is an error.
Result<BackendOptions> CpuBackendOptions(std::string_view backend);

/// Index of the largest logit; ties go to the lowest id (NaN never wins over a number).
int32_t Argmax(const float* logits, int64_t n);

/// The request checked (as Generate) and its Sequence created, ready for Prefill.
Result<Sequence> SequenceForRequest(const ModelConfig& cfg, const ModelWeights& weights,
                                    const GenerateRequest& request, const BackendOptions& backend);

/// Greedy decode from `logits` (the last prompt token's): appends argmax tokens to
/// result->tokens, stepping `seq`, until a stop token (result->stopped) or max_new_tokens.
Status DecodeGreedy(const ModelConfig& cfg, const GenerateRequest& request, Sequence* seq,
                    std::vector<float>* logits, GenerateResult* result);

/// Runs `request` on `weights` (already in the request's weight format; request.precision.weights
/// is not applied here). Errors: empty prompt, token ids outside the vocabulary, negative
/// max_new_tokens or index_topk, an invalid profile, or a length above max_position_embeddings.
Result<GenerateResult> Generate(const ModelConfig& cfg, const ModelWeights& weights,
                                const GenerateRequest& request, const BackendOptions& backend);

}  // namespace nw::cpu
