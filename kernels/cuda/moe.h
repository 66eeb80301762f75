// MoE routing, dispatch and combination on the GPU with the CPU reference's semantics
// (engine/cpu/moe.h). The expert products themselves run through LaunchLinear (linear.h): the
// gate as a dense product, the routed experts as gathered products over the row lists built here,
// the shared expert as a dense product.
//
//   Route     per token: scores = score_func(gate logits) (softmax | sigmoid | sqrt(softplus),
//             exp/log in double rounded to fp32); hash layers take tid2eid[token]; other layers
//             the top-k of scores + bias (descending, ties to the lower expert id); weights =
//             the unbiased scores, renormalised (non-softmax) in selection order, times
//             route_scale; then the k slots are stably sorted by expert id (the order the CPU adds
//             them in).
//   Dispatch  one row list per expert, slots in (token, slot) order, and a tile list for the
//             gathered products (deterministic: no atomics).
//   SwiGlu    h = weight * (silu(g) * u), g clamped to at most `limit` and u to [-limit, limit]
//             when limit > 0 (silu(g) = g / (1 + exp(-g))).
//   Combine   out[t] = ((0 + y[slot 0]) + y[slot 1] ...) + shared[t], slots in sorted order.
// Thread-safety: launchers are reentrant.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"

namespace nw::cuda {

enum class MoeScoreFunc { kSoftmax, kSigmoid, kSqrtSoftplus };

struct MoeRouteParams {
  float* logits = nullptr;             // [tokens, experts]; replaced by the scores
  const float* bias = nullptr;         // [experts] or null
  const int32_t* tid2eid = nullptr;    // [vocab, k] (hash layers) or null
  const int32_t* token_ids = nullptr;  // [tokens] (hash layers)
  int32_t* experts = nullptr;          // [tokens, k] sorted by expert id (stable)
  float* weights = nullptr;            // [tokens, k] in the same order
  int64_t tokens = 0;
  int n_experts = 0;
  int k = 0;
  MoeScoreFunc score_func = MoeScoreFunc::kSqrtSoftplus;
  float route_scale = 1.0f;
};
Status LaunchMoeRoute(const MoeRouteParams& p, cudaStream_t stream);

/// Row lists: slot s = t * k + j. list[offsets[e] .. offsets[e+1]) are the slots routed to expert
/// e in ascending s; list_token[i] = list[i] / k; position[s] = the list index of slot s. Tiles
/// of at most tile_rows rows per expert are listed in (tile_expert, tile_row0, tile_rows); unused
/// tiles up to max_tiles get expert -1. max_tiles must be >= tokens * k / tile_rows + experts.
/// Runs in parallel over chunks of kMoeDispatchChunk slots (one warp each: count, a scan over
/// chunks and experts, then a stable placement with warp match), so its cost grows with the
/// slots over the GPU, not on one thread; `chunk_counts` is its scratch
/// (MoeDispatchScratchInts(tokens * k, experts) int32 values).
inline constexpr int64_t kMoeDispatchChunk = 1024;
inline int64_t MoeDispatchScratchInts(int64_t slots, int64_t experts) {
  return ((slots + kMoeDispatchChunk - 1) / kMoeDispatchChunk) * experts + experts;
}
struct MoeDispatchParams {
  const int32_t* experts = nullptr;  // [tokens, k]
  int32_t* offsets = nullptr;        // [experts + 1]
  int32_t* list_token = nullptr;     // [tokens * k]
  int32_t* position = nullptr;       // [tokens * k]
  int32_t* tile_expert = nullptr;    // [max_tiles]
  int32_t* tile_row0 = nullptr;      // [max_tiles]
  int32_t* tile_rows = nullptr;      // [max_tiles]
  int32_t* chunk_counts = nullptr;   // scratch, MoeDispatchScratchInts(tokens * k, n_experts)
  int64_t tokens = 0;
  int n_experts = 0;
  int k = 0;
  int tile_rows_max = 32;
  int64_t max_tiles = 0;
};
Status LaunchMoeDispatch(const MoeDispatchParams& p, cudaStream_t stream);

struct SwiGluParams {
  const float* gate = nullptr;    // [rows, inter] g = w1 x
  const float* up = nullptr;      // [rows, inter] u = w3 x
  const float* weight = nullptr;  // [rows] per-row routing weight, or null (1)
  float* out = nullptr;           // [rows, inter]; may equal gate
  int64_t rows = 0;
  int64_t inter = 0;
  float limit = 0.0f;  // 0 = no clamp
};
Status LaunchSwiGlu(const SwiGluParams& p, cudaStream_t stream);

/// Gathers the per-row routing weights into list order: list_weight[position[s]] = weights[s].
struct MoeListWeightParams {
  const float* weights = nullptr;     // [tokens * k]
  const int32_t* position = nullptr;  // [tokens * k]
  float* list_weight = nullptr;       // [tokens * k]
  int64_t slots = 0;
};
Status LaunchMoeListWeights(const MoeListWeightParams& p, cudaStream_t stream);

struct MoeCombineParams {
  const float* expert_out = nullptr;  // [tokens * k, dim] in list order
  const int32_t* position = nullptr;  // [tokens * k]
  const float* shared = nullptr;      // [tokens, dim]
  float* out = nullptr;               // [tokens, dim]
  int64_t tokens = 0;
  int k = 0;
  int64_t dim = 0;
  bool round_bf16 = false;  // out rounded to bf16 as stored (an activation rounding point)
};
Status LaunchMoeCombine(const MoeCombineParams& p, cudaStream_t stream);

}  // namespace nw::cuda
