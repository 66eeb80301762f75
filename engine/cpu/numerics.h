// Precision-profile hooks of the CPU reference backend: where each part of a PrecisionProfile
// rounds values. Everything is computed in fp32 (fp32 accumulation everywhere); a part set to
// fp32 rounds nothing, so the fp32 profile is the exact oracle. Formats are reproduced bit-exactly
// by fake quantization (kernels/quant/quant.h).
//
// weights      Applied once per format by the engine (RequantizeWeights, cached per engine), not
//              here: the forward pass just reads whichever ModelWeights it is given.
// activations  bf16: round to nearest even at these points (DeepSeek's reference keeps these
//              tensors in bf16):
//                - the embedding rows; the mHC outputs (hc_pre's u and hc_post's new streams; the
//                  head collapse); the MoE output;
//                - every RMSNorm output: attn_norm, ffn_norm, q_norm, the weightless per-head q
//                  norm, kv_norm, both compressors' norms, the final norm;
//                - every attention linear output: wq_a, wq_b, wkv, indexer wq_b, weights_proj
//                  (before its c_I^-1/2 h_I^-1/2 scale), the grouped wo_a, wo_b;
//                - after each RoPE (q, kv, compressed entries, indexer q) and after the inverse
//                  RoPE of the attention output; the attention output itself (before the inverse
//                  RoPE); after each Hadamard;
//                - a compressed entry after pooling (before its norm).
//              Not rounded: compressor projections and pooling weights (fp32 in the reference),
//              attention logits / probabilities, indexer scores, the mHC mixing weights, logits.
// index_q      Each indexer query head after RoPE + Hadamard (c_I values, one "row").
// index_k      Each index-key entry when it is stored (after RoPE + Hadamard).
//              bf16: round; fp8: e4m3 with a ue8m0 scale per 128 (one block per head vector when
//              c_I <= 128); mxfp4: e2m1 with a ue8m0 scale per 32; nvfp4: e2m1 with e4m3 scales per
//              16 and the row's fp32 global scale.
// kv           Each stored KV entry when it is produced, before any query reads it: the raw window
//              KV of every token (after kv_norm and RoPE) and every compressed KV entry (after norm
//              and RoPE). bf16: round; fp8: the V4 layout (e4m3 nope dims with a ue8m0 scale per
//              64, bf16 rope dims).
// Thread-safety: immutable value.
#pragma once

#include <cstdint>

#include "engine/precision.h"

namespace nw::cpu {

class Numerics {
 public:
  Numerics() = default;
  Numerics(const PrecisionProfile& p, int head_dim, int rope_dim)
      : p_(p), head_dim_(head_dim), rope_dim_(rope_dim) {}

  const PrecisionProfile& profile() const { return p_; }
  /// Activation rounding point over x[0..n).
  void Act(float* x, int64_t n) const;
  /// One indexer query head (n = c_I values).
  void IndexQ(float* x, int64_t n) const { IndexFormat(p_.index_q, x, n); }
  /// One index-key entry (n = c_I values).
  void IndexK(float* x, int64_t n) const { IndexFormat(p_.index_k, x, n); }
  /// One KV entry of head_dim values [nope | rope].
  void Kv(float* x) const;

 private:
  static void IndexFormat(NumFormat f, float* x, int64_t n);

  PrecisionProfile p_;
  int head_dim_ = 0;
  int rope_dim_ = 0;
};

}  // namespace nw::cpu
