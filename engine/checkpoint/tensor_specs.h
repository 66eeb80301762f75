// The tensor plan of a DeepSeek-V4 checkpoint: every logical tensor's on-disk name, shape and
// role (docs/checkpoint-format.md §2), derived from a ModelConfig. The loader checks an archive
// against it and the random-checkpoint writer produces it, so the two cannot drift apart.
// `.scale` companions of quantized linears are not listed: they follow from the weight's dtype.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/checkpoint/config.h"

namespace nw {

enum class TensorKind {
  kLinear,        // FP8 (e4m3 + 128x128 ue8m0 .scale) in the real checkpoint
  kExpertLinear,  // routed expert: FP4 (e2m1 packed + 1x32 ue8m0 .scale) in the real checkpoint
  kDense,         // BF16 without scale: embed, head, norms, compressor wkv/wgate, weights_proj,
                  // gate.weight
  kF32,           // F32: hc_*, attn_sink, ape, gate.bias
  kTid2eid,       // I64 [V, k] expert ids (I32 accepted)
};

/// How a random checkpoint initializes a tensor.
enum class TensorInit {
  kFanIn,    // N(0,1)/sqrt(shape[1]) (every [out, in] matrix, embed and head included)
  kOnes,     // RMSNorm weights, hc scales
  kZeros,    // attn_sink, gate.bias
  kSmall,    // N(0,1) * 0.02 (compressor ape)
  kHcFn,     // N(0,1) * 0.1 / sqrt(fan_in): mixes start small (std ~0.1)
  kHcBase,   // pre logit(1/n), post 0, comb 4 on the diagonal: near-identity stream mixing
  kTid2eid,  // k distinct expert ids per row
};

struct TensorSpec {
  std::string name;            // on-disk name, e.g. "layers.1.attn.wq_a.weight"
  std::vector<int64_t> shape;  // logical shape ([out, in] for linears)
  TensorKind kind = TensorKind::kDense;
  TensorInit init = TensorInit::kFanIn;
  bool mtp = false;  // part of an MTP block (checked at load, then dropped)
};

/// Every tensor of §2 for `cfg`: globals, main layers 0..L-1, then MTP blocks mtp.0.. (each with
/// its extras). The config must be valid.
std::vector<TensorSpec> CheckpointTensorSpecs(const ModelConfig& cfg);

/// True for kLinear and kExpertLinear.
bool IsLinearKind(TensorKind k);
/// "x.weight" -> "x.scale" (the companion of a quantized linear).
std::string ScaleName(const std::string& weight_name);
/// Aliases the loader ignores (docs/checkpoint-format.md §2.6): mtp.{j}.emb.tok_emb.weight,
/// mtp.{j}.embed.weight and mtp.{j}.head.weight for j < n_mtp_layers.
bool IsIgnoredAlias(const std::string& name, const ModelConfig& cfg);

}  // namespace nw
