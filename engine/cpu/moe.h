// MoE feed-forward for one token, CPU reference: sqrt-softplus (or softmax / sigmoid) scores,
// selection bias (for selection only), hash routing through tid2eid on the first n_hash_layers,
// top-k renormalisation (non-softmax), route_scale, SwiGLU experts with swiglu_limit on routed
// experts (gate <= lim, |up| <= lim), plus the unclamped shared expert.
// Spec: deepseek-v4-attention.md §2.8, checkpoint.md §2.5; DeepSeek's reference Gate / Expert /
// MoE. Thread-safety: pure functions.
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

/// Routing only (exposed for tests and probes).
MoeRouting MoeRoute(const ModelConfig& cfg, const FfnWeights& w, int layer_id, const float* x,
                    int32_t token_id);
/// out[D] = shared(x) + sum_k weight_k * expert_k(x); x is the ffn_norm output ([D]).
void MoeForward(const ModelConfig& cfg, const FfnWeights& w, int layer_id, const float* x,
                int32_t token_id, float* out);

}  // namespace nw::cpu
