// Number formats of DeepSeek-V4, bit-exact, shared by the CPU reference and (later) CUDA kernels.
//
// The scalar codecs (bf16, e4m3, e2m1, ue8m0 and the power-of-two scale rule) live in scalar.h as
// inline host/device functions and are re-exported here; their exact semantics are documented
// there. This header adds the block formats on top of them, implemented in quant.cc (host only).
//
// Block formats (spec: docs/v4-attention.md §5, docs/checkpoint-format.md §3):
// - FP8 block: one ue8m0 scale s = 2^ceil(log2(amax/448)) per block (amax floored at 448*2^-126),
//   code = e4m3(clamp(x/s, +-448)), value = decode(code) * s.
// - MXFP4: blocks of 32, the same rule with qmax 6 and e2m1 codes.
// - NVFP4: blocks of 16. s_global = amax_tensor/(448*6) (fp32), s_block = e4m3(amax_block /
//   (6*s_global)) (RNE), code = e2m1(x / (s_block*s_global)), value = (code*s_block)*s_global.
//   An all-zero tensor (s_global == 0) and a block whose scale rounds to e4m3 zero give zeros
//   (signed like x); a non-finite amax_tensor gives NaN everywhere.
// - V4 fp8 KV layout: per token [nope | rope]: the nope dims (448 in V4) in e4m3 with one ue8m0
//   scale per 64 (qmax 448), the rope dims (64) rounded to bf16.
// - Weights: FP8 [out, in] e4m3 with [ceil(out/128), ceil(in/128)] ue8m0 scales (edge blocks are
//   partial); FP4 [out, in/2] packed e2m1 (low nibble = even element) with [out, ceil(in/32)]
//   ue8m0 scales. The quantizers use the power-of-two rule above.
// NaN: a block's amax is NaN when any of its values is (torch's amax), so its scale is NaN and
// the whole block dequantizes to NaN; an infinite value does the same. Thread-safety: pure
// functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/quant/scalar.h"

namespace nw::quant {

inline constexpr size_t kMxfp4Block = 32;
inline constexpr size_t kNvfp4Block = 16;
inline constexpr size_t kV4KvScaleBlock = 64;
inline constexpr int64_t kFp8WeightBlock = 128;
inline constexpr int64_t kFp4WeightGroup = 32;

// ---- Scalars (scalar.h) -------------------------------------------------------------------------
// float RoundBf16(float x);  uint16_t FloatToBf16Bits(float x);  float Bf16BitsToFloat(uint16_t);
// uint8_t EncodeE4M3(float x);  float DecodeE4M3(uint8_t b);
// uint8_t EncodeE2M1(float x);  float DecodeE2M1(uint8_t code);
// float DecodeUe8m0(uint8_t b);  uint8_t Ue8m0ScaleFor(float amax, float qmax);

// ---- Fake quantization (quantize then dequantize; in place allowed: y may equal x) ------------
/// Rounds each value to bf16 (returned as fp32).
void FakeQuantBf16(const float* x, float* y, size_t n);
/// e4m3 with one ue8m0 scale per `block` consecutive values (n % block may be non-zero: the last
/// block is partial; block 0 means one block of all n values).
void FakeQuantFp8(const float* x, float* y, size_t n, size_t block);
/// MXFP4: e2m1 with a ue8m0 scale per 32 (the last block may be partial).
void FakeQuantMxfp4(const float* x, float* y, size_t n);
/// NVFP4 over a tensor of n values: per-16 e4m3 scales and one fp32 global scale from the
/// tensor's amax (the tensor is the n values passed: for index q/k that is one row).
void FakeQuantNvfp4(const float* x, float* y, size_t n);
/// V4 fp8 KV: x is one token of head_dim values [nope | rope]; nope (head_dim - rope_dim,
/// a multiple of 64) in e4m3 per-64 ue8m0, rope rounded to bf16. Requires
/// 0 <= rope_dim <= head_dim.
void FakeQuantV4Kv(const float* x, float* y, int head_dim, int rope_dim);

// ---- Packed storage (weights on disk) ---------------------------------------------------------
/// Dequantizes an [out, in] F8_E4M3 weight with [ceil(out/128), ceil(in/128)] ue8m0 scales.
void DequantFp8Weight(const uint8_t* w, const uint8_t* scale, int64_t out, int64_t in, float* y);
/// Quantizes an [out, in] fp32 weight to e4m3 + 128x128 ue8m0 scales (the checkpoint writer).
/// Each 128x128 tile (partial at the edges) is exactly FakeQuantFp8 of the tile's values.
void QuantizeFp8Weight(const float* x, int64_t out, int64_t in, uint8_t* w, uint8_t* scale);
/// Dequantizes packed FP4 [out, in/2] bytes (low nibble = even element) with [out, ceil(in/32)]
/// ue8m0 scales. `in` must be even.
void DequantFp4Weight(const uint8_t* w, const uint8_t* scale, int64_t out, int64_t in, float* y);
/// Quantizes an [out, in] fp32 weight to packed e2m1 + per-32 ue8m0 scales (each group of 32
/// along a row is exactly FakeQuantMxfp4 of its values). `in` must be even.
void QuantizeFp4Weight(const float* x, int64_t out, int64_t in, uint8_t* w, uint8_t* scale);

}  // namespace nw::quant
