// A model's weights on the GPU, uploaded once per (engine, weight format): every tensor the
// forward pass reads, as fp32 device buffers. The checkpoint's formats (BF16, F8_E4M3 with F8_E8M0
// block scales, FP4 experts) are dequantized at load (engine/checkpoint/loader.h) and a profile's
// weight format is applied by RequantizeWeights before the upload, so the GPU reads exactly the
// values the CPU reference reads. The routed experts of a layer sit in one buffer per matrix
// ([E, I, D] and [E, D, I]) for the gathered expert products.
// With bf16 copies asked for (the profiles with bf16 activations), every linear weight also gets a
// bf16 copy, the operand of the tensor-core linears (kernels/cuda/linear.h, w_bf16): one piece
// when its values are all bf16 values, else three bf16 pieces that sum to each value exactly.
// Thread-safety: immutable after Upload; read by one engine's sequences.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "common/status.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/weights.h"
#include "kernels/cuda/common.h"

namespace nw::cuda {

using DevTensor = DeviceBuffer<float>;

struct DevHc {
  DevTensor fn, base, scale;
};

struct DevCompressor {
  int ratio = 0;
  int dim = 0;
  DevTensor wkv, wgate, ape, norm;
};

struct DevLayer {
  DevHc hc_attn, hc_ffn;
  DevTensor attn_norm, ffn_norm;
  // Attention.
  DevTensor attn_sink, wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b;
  std::optional<DevCompressor> compressor;
  // Indexer (ratio 4).
  DevTensor ix_wq_b, ix_weights_proj;
  std::optional<DevCompressor> ix_compressor;
  // MoE.
  DevTensor gate, gate_bias;         // gate_bias empty on hash layers
  DeviceBuffer<int32_t> tid2eid;     // hash layers
  DevTensor w1_all, w3_all, w2_all;  // routed experts, [E, I, D], [E, I, D], [E, D, I]
  DevTensor sh_w1, sh_w3, sh_w2;     // shared expert
};

struct DeviceModel {
  DevTensor embed, norm, head;
  DevHc hc_head;
  std::vector<DevLayer> layers;
  int64_t bytes = 0;  // device bytes held by the weights (the bf16 copies included)
  // bf16 copies keyed by the fp32 tensor's device address: one piece when every value is a bf16
  // value, else three pieces that sum to each value exactly (kernels/cuda/linear.h w_pieces).
  struct Bf16Weight {
    DeviceBuffer<uint16_t> bits;  // [pieces, elements]
    int pieces = 1;
    int64_t piece_stride = 0;  // elements
  };
  std::map<const float*, Bf16Weight> bf16_copies;

  /// The bf16 copy of a linear weight, or null (not asked for).
  const Bf16Weight* Bf16(const DevTensor& t) const {
    auto it = bf16_copies.find(t.data());
    return it == bf16_copies.end() ? nullptr : &it->second;
  }

  /// Uploads `w` (checked against `cfg` by the caller) to the current device; `bf16_copies`: also
  /// the bf16 copies of the linear weights.
  static Result<DeviceModel> Upload(const ModelConfig& cfg, const ModelWeights& w,
                                    bool bf16_copies = false);
};

/// The RoPE tables of a model on the GPU, for positions [0, rows): the CPU's cpu::RopeTable
/// values uploaded as is, plain (rope_theta, no YaRN) for ratio-0 layers and YaRN
/// (compress_rope_theta) for compressed layers and their indexer, [rows, rope_head_dim / 2] each.
/// A position's values do not depend on `rows`, so one upload per engine serves every sequence.
/// Thread-safety: immutable after Upload.
struct DeviceRope {
  int64_t rows = 0;
  DevTensor plain_cos, plain_sin, comp_cos, comp_sin;

  static Result<DeviceRope> Upload(const ModelConfig& cfg, int64_t rows);
};

}  // namespace nw::cuda
