// Number formats of DeepSeek-V4, bit-exact, shared by the CPU reference and (later) CUDA kernels.
//
// Conventions (spec: ../shared/reference/deepseek-v4-attention.md §5, checkpoint.md §3):
// - bf16: round to nearest, ties to even; NaN stays NaN.
// - e4m3 (float8_e4m3fn): bias 7, no inf, max 448, NaN = S.1111.111; encode = round to nearest
//   even with saturation to +-448 (inputs are pre-clamped by the scaled quantizers).
// - ue8m0 (float8_e8m0fnu): value 2^(byte-127); 0xFF is NaN; no zero.
// - e2m1: magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}, sign bit 3; round to nearest even; two per byte,
//   even element in the low nibble.
// - Power-of-two scale for a block: 2^ceil(log2(amax/qmax)), amax floored at qmax*2^-126, so values
//   never clip (DeepSeek's act_quant / fp4_quant rule).
// - MXFP4: blocks of 32, ue8m0 scale as above with qmax 6.
// - NVFP4: blocks of 16, e4m3 block scale = e4m3(amax_block / (6 * s_global)),
//   s_global = amax_tensor / (448 * 6) (fp32).
// - V4 fp8 KV layout: per token 448 nope dims in e4m3 with one ue8m0 scale per 64 (qmax 448) and
//   64 rope dims in bf16.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define NW_HD __host__ __device__
#else
#define NW_HD
#endif

namespace nw::quant {

// ---- Scalars ----------------------------------------------------------------------------------
float RoundBf16(float x);
uint16_t FloatToBf16Bits(float x);
float Bf16BitsToFloat(uint16_t b);

uint8_t EncodeE4M3(float x);  // saturating, RNE
float DecodeE4M3(uint8_t b);  // NaN for 0x7F/0xFF

uint8_t EncodeE2M1(float x);  // 4-bit code, saturating at +-6, RNE
float DecodeE2M1(uint8_t code);

float DecodeUe8m0(uint8_t b);  // NaN for 0xFF
/// ue8m0 byte of 2^ceil(log2(max(amax, qmax*2^-126)/qmax)).
uint8_t Ue8m0ScaleFor(float amax, float qmax);

// ---- Fake quantization (quantize then dequantize, in place allowed: y may equal x) ----------
void FakeQuantBf16(const float* x, float* y, size_t n);
/// e4m3 with one ue8m0 scale per `block` consecutive values (n % block may be non-zero: the last
/// block is partial).
void FakeQuantFp8(const float* x, float* y, size_t n, size_t block);
/// MXFP4: e2m1 with a ue8m0 scale per 32.
void FakeQuantMxfp4(const float* x, float* y, size_t n);
/// NVFP4 over a tensor of n values: per-16 e4m3 scales and one fp32 global scale from the
/// tensor's amax (the tensor is the n values passed: for index q/k that is one row).
void FakeQuantNvfp4(const float* x, float* y, size_t n);
/// V4 fp8 KV: x is one token of head_dim values [nope | rope]; nope (head_dim - rope_dim,
/// a multiple of 64) in e4m3 per-64 ue8m0, rope rounded to bf16.
void FakeQuantV4Kv(const float* x, float* y, int head_dim, int rope_dim);

// ---- Packed storage (weights on disk) ---------------------------------------------------------
/// Dequantizes an [out, in] F8_E4M3 weight with [ceil(out/128), ceil(in/128)] ue8m0 scales.
void DequantFp8Weight(const uint8_t* w, const uint8_t* scale, int64_t out, int64_t in, float* y);
/// Quantizes an [out, in] fp32 weight to e4m3 + 128x128 ue8m0 scales (the checkpoint writer).
void QuantizeFp8Weight(const float* x, int64_t out, int64_t in, uint8_t* w, uint8_t* scale);
/// Dequantizes packed FP4 [out, in/2] bytes (low nibble = even element) with [out, in/32] ue8m0.
void DequantFp4Weight(const uint8_t* w, const uint8_t* scale, int64_t out, int64_t in, float* y);
/// Quantizes an [out, in] fp32 weight to packed e2m1 + per-32 ue8m0 scales.
void QuantizeFp4Weight(const float* x, int64_t out, int64_t in, uint8_t* w, uint8_t* scale);

}  // namespace nw::quant
