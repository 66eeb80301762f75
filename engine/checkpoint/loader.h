// Weight loading: a safetensors archive -> ModelWeights in fp32 (docs/checkpoint-format.md §2, §3,
// §6).
//
// Every tensor of CheckpointTensorSpecs(cfg) must be present with its exact shape; anything else
// in the archive is an error, except `.scale` companions of quantized linears and the MTP aliases
// of §2.6. Each linear's format is chosen from its on-disk dtype:
//   BF16 / F16 / F32 [out, in]                       plain (no .scale allowed)
//   F8_E4M3 [out, in] + F8_E8M0 .scale [ceil(out/128), ceil(in/128)]   FP8 block
//   I8 or U8 [out, in/2], or F4 [out, in], + F8_E8M0 .scale [out, in/32]   FP4 (in % 32 == 0)
// Scales equal to 0xFF (NaN) and e4m3 NaN bytes are rejected. Non-linear tensors accept
// BF16/F16/F32; tid2eid accepts I64/I32 [V, k] with k distinct ids in [0, E) per row. MTP blocks
// (mtp.{j}.*) are checked (presence, dtype, shape, scales) but not decoded, and are dropped.
// Every error names the archive and the tensor. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/checkpoint/tensor.h"
#include "engine/checkpoint/weights.h"
#include "engine/precision.h"

namespace nw {

/// Loads and dequantizes every main-model tensor. `cfg` must be valid.
Result<ModelWeights> LoadModelWeights(const SafetensorsArchive& archive, const ModelConfig& cfg);

/// Decodes one [out, in] linear weight (`weight_name` ends in ".weight"; its scale, if any, is
/// ScaleName(weight_name)) in whichever on-disk format it has.
Result<Tensor> LoadLinearWeight(const SafetensorsArchive& archive, const std::string& weight_name,
                                int64_t out, int64_t in);

/// Fake-quantizes the linear weights to the profile's weight format; norms, hc_*, ape, attn_sink
/// and gate.bias are never touched.
///   kFp32: an exact copy.
///   kBf16: every linear-like matrix (embed and head included) rounded to bf16.
///   kFp8:  the real V4 deployment: the linears that V4 ships in FP8/FP4 (wq_a, wq_b, wkv, wo_a,
///          wo_b, indexer.wq_b, routed and shared experts) become e4m3 with 128x128 ue8m0 block
///          scales; the matrices V4 ships in BF16 (embed, head, compressor and
///          indexer-compressor wkv/wgate, indexer weights_proj, gate.weight) are rounded to bf16.
///   kMxfp4 / kNvfp4: as kFp8 with MXFP4 / NVFP4 (whole-tensor) fake quantization of the first
///          group (not a V4 format; for experiments only).
ModelWeights RequantizeWeights(const ModelWeights& weights, NumFormat weights_format);

/// IEEE half -> float (exact).
float HalfBitsToFloat(uint16_t h);

}  // namespace nw
