// MoE feed-forward for one token, CPU reference: sqrt-softplus (or softmax / sigmoid) scores,
// selection bias (for selection only), hash routing through tid2eid on the first n_hash_layers,
// top-k renormalisation (non-softmax), route_scale, SwiGLU experts with swiglu_limit on routed
// experts (gate <= lim, |up| <= lim), plus the shared expert, clamped the same way unless
// cfg.swiglu_clamp_shared_expert is false (DeepSeek's first release; docs/engine-reference.md).
// Spec: docs/v4-attention.md §2.8, docs/checkpoint-format.md §2.5; DeepSeek's reference Gate /
// Expert / MoE. Thread-safety: pure functions.
//
// Exact semantics (all fp32, as the reference):
//   s = score_func(W_g x)                   sqrt(softplus) | softmax over E | sigmoid
//   hash layer (layer_id < n_hash_layers):  experts = tid2eid[token_id, 0..k)   (no bias)
//   otherwise:  experts = top-k of s + gate_bias, in descending order; ties go to the lowest
//               expert id (torch.topk leaves ties unspecified; this makes the oracle
//               deterministic). An empty gate_bias counts as zero.
//   weights = s[experts] (the unbiased scores); for non-softmax score funcs weights /=
//   sum(weights); then weights *= route_scale. expert(x) = w2(silu(g) * u) with g = w1 x, u = w3 x;
//   routed experts first clamp u to [-lim, lim] and g to at most lim (lim = swiglu_limit > 0; g has
//   no lower bound); the routing weight multiplies silu(g) * u before w2, as the reference does.
//   out = sum over routed experts in ascending expert id of weight * expert(x), then + shared(x)
//   (shared(x) clamped as the routed experts when cfg.swiglu_clamp_shared_expert, else not).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/checkpoint/config.h"
#include "engine/checkpoint/weights.h"

namespace nw::cpu {

struct MoeRouting {
  std::vector<int32_t> experts;  // [n_activated_experts], selection order
  std::vector<float> weights;    // [n_activated_experts], after renormalisation and route_scale
};

/// Routing only (exposed for tests and probes). Preconditions: x has cfg.dim values; on hash
/// layers 0 <= token_id < vocab and tid2eid holds vocab * n_activated_experts ids in [0, E)
/// (checked: std::out_of_range otherwise).
MoeRouting MoeRoute(const ModelConfig& cfg, const FfnWeights& w, int layer_id, const float* x,
                    int32_t token_id);
/// out[D] = shared(x) + sum_k weight_k * expert_k(x); x is the ffn_norm output ([D]).
void MoeForward(const ModelConfig& cfg, const FfnWeights& w, int layer_id, const float* x,
                int32_t token_id, float* out);
/// MoeForward split over `ranks` simulated tensor-parallel ranks: rank r runs the selected routed
/// experts with ids in [r E/ranks, (r+1) E/ranks) in ascending id into its partial output;
/// `out` is the sum of the partials in rank order (the all-reduce) plus the shared expert
/// (replicated, added after the all-reduce as in DeepSeek's MoE.forward). E must be a multiple
/// of ranks. ranks == 1 is MoeForward.
/// MoeForward of `rows` tokens at once (x, out: [rows, D]; token_ids: [rows]): the gate runs
/// over every row, then each expert over the rows routed to it, each weight row read once for
/// all of them (LinearRows). Every row is bit-identical to MoeForward of that row alone (the
/// same dot products, and each row still adds its routed experts in ascending id, then the
/// shared expert).
void MoeForwardRows(const ModelConfig& cfg, const FfnWeights& w, int layer_id, const float* x,
                    const int32_t* token_ids, int64_t rows, float* out);
void MoeForwardRanks(const ModelConfig& cfg, const FfnWeights& w, int layer_id, const float* x,
                     int32_t token_id, int ranks, float* out);

}  // namespace nw::cpu
