// Scalar codecs of DeepSeek-V4's number formats, bit-exact, for host and device code.
//
// Everything here is an `inline NW_HD` function on integer bit manipulation, so the same source
// compiles as plain C++ (the CPU reference) and under nvcc (the CUDA kernels), and both give the
// same bits. No std:: calls, no global tables, no dependence on the FPU rounding mode or on
// flush-to-zero (the only float operations are exact, or the one fp32 division the DeepSeek scale
// rule itself performs).
//
// Formats (spec: docs/v4-attention.md §5, docs/checkpoint-format.md §3):
// - bf16: round to nearest, ties to even. Any NaN becomes the quiet NaN 0x7FC0 (torch's
//   c10::BFloat16; CUDA's __float2bfloat16_rn gives 0x7FFF instead, so compare NaNs as NaNs).
// - e4m3 (torch float8_e4m3fn): bias 7, no inf, max 448, subnormals k*2^-9, NaN = S.1111.111.
//   EncodeE4M3 rounds to nearest even and SATURATES finite and infinite values to +-448. torch's
//   cast would give NaN for |x| >= 480; DeepSeek clamps to +-448 before every cast, so saturation
//   is what the quantizers compute (and what cvt.rn.satfinite does on the GPU). NaN -> 0x7F with
//   the input's sign; -0 -> 0x80.
// - e2m1: sign in bit 3, magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}; round to nearest even (ties go
//   to the even code: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4), saturating at 6.
//   e2m1 has no NaN: a NaN input encodes as +6 (code 0x7), like CUDA's cvt to e2m1; the block
//   quantizers make a NaN block come out NaN through its NaN scale instead.
// - ue8m0 (torch float8_e8m0fnu): 2^(byte-127), byte 0xFF = NaN, no sign, no zero.
// - Power-of-two block scale: 2^ceil(log2(amax/qmax)) with amax floored at qmax*2^-126, the
//   ceil taken exactly from the fp32 bits of amax/qmax (DeepSeek's fast_log2_ceil), so a power of
//   two gives itself. For qmax in {6, 448} the fp32 quotient amax/qmax gives the same exponent as
//   DeepSeek's amax * fp32(1/qmax) for every fp32 amax (tested).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

#if !defined(NW_HD)
#if defined(__CUDACC__)
#define NW_HD __host__ __device__
#else
#define NW_HD
#endif
#endif

namespace nw::quant {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE2M1Max = 6.0f;

// ---- Bit casts ----------------------------------------------------------------------------------
inline NW_HD uint32_t FloatBits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return u;
}

inline NW_HD float FloatFromBits(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof(x));
  return x;
}

inline NW_HD bool IsNanBits(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }

/// The canonical quiet NaN, 0x7FC00000.
inline NW_HD float QuietNan() { return FloatFromBits(0x7FC00000u); }

// ---- Rounding helpers ---------------------------------------------------------------------------
/// v / 2^shift rounded to the nearest integer, ties to even. Requires shift >= 1 and v < 2^24 (a
/// significand), so any shift >= 26 rounds to 0.
inline NW_HD uint32_t ShiftRightRne(uint32_t v, int shift) {
  if (shift >= 26) return 0u;
  const uint32_t q = v >> shift;
  const uint32_t rem = v & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return q + ((rem > half || (rem == half && (q & 1u) != 0u)) ? 1u : 0u);
}

/// The magnitude code of a finite or infinite fp32 value `a` (bits, sign cleared, not NaN) in a
/// sign-less minifloat with kMan mantissa bits and smallest normal exponent kEmin (= 1 - bias):
/// round to nearest even, subnormals included, saturating at kMaxCode. The code of a normal result
/// is (biased exponent << kMan) + mantissa = ((e - kEmin) << kMan) + significand, so a mantissa
/// that rounds up carries into the exponent, and a subnormal that rounds up becomes the smallest
/// normal, without special cases.
template <int kMan, int kEmin, uint32_t kMaxCode>
inline NW_HD uint32_t EncodeMagnitudeRne(uint32_t a) {
  if (a >= 0x7F800000u) return kMaxCode;
  const int biased = static_cast<int>(a >> 23);
  const int e = biased == 0 ? -126 : biased - 127;  // a = sig * 2^(e - 23)
  const uint32_t sig = (a & 0x7FFFFFu) | (biased == 0 ? 0u : 0x800000u);
  uint32_t code;
  if (e < kEmin) {  // subnormal grid: multiples of 2^(kEmin - kMan)
    code = ShiftRightRne(sig, 23 - kMan + (kEmin - e));
  } else {
    code = (static_cast<uint32_t>(e - kEmin) << kMan) + ShiftRightRne(sig, 23 - kMan);
  }
  return code < kMaxCode ? code : kMaxCode;
}

// ---- bf16 ---------------------------------------------------------------------------------------
inline NW_HD uint16_t FloatToBf16Bits(float x) {
  const uint32_t u = FloatBits(x);
  if (IsNanBits(u)) return 0x7FC0u;
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

inline NW_HD float Bf16BitsToFloat(uint16_t b) {
  return FloatFromBits(static_cast<uint32_t>(b) << 16);
}

inline NW_HD float RoundBf16(float x) { return Bf16BitsToFloat(FloatToBf16Bits(x)); }

// ---- e4m3 (float8_e4m3fn) -----------------------------------------------------------------------
/// Round to nearest even, saturating to +-448 (inf included); NaN -> 0x7F | sign.
inline NW_HD uint8_t EncodeE4M3(float x) {
  const uint32_t u = FloatBits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  if (IsNanBits(u)) return static_cast<uint8_t>(sign | 0x7Fu);
  return static_cast<uint8_t>(sign | EncodeMagnitudeRne<3, -6, 0x7Eu>(u & 0x7FFFFFFFu));
}

/// Exact value of a code; NaN for 0x7F and 0xFF; 0x80 is -0.
inline NW_HD float DecodeE4M3(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xFu;
  const uint32_t man = b & 0x7u;
  if (exp == 15u && man == 7u) return FloatFromBits(sign | 0x7FC00000u);
  if (exp == 0u) {  // man * 2^-9, exact in fp32
    return FloatFromBits(sign | FloatBits(static_cast<float>(man) * 0x1p-9f));
  }
  return FloatFromBits(sign | ((exp + 120u) << 23) | (man << 20));
}

// ---- e2m1 ---------------------------------------------------------------------------------------
/// 4-bit code (bit 3 = sign): round to nearest even, saturating at +-6; NaN -> 0x7 (+6).
inline NW_HD uint8_t EncodeE2M1(float x) {
  const uint32_t u = FloatBits(x);
  const uint32_t sign = (u >> 28) & 0x8u;
  if (IsNanBits(u)) return 0x7u;
  return static_cast<uint8_t>(sign | EncodeMagnitudeRne<1, 0, 0x7u>(u & 0x7FFFFFFFu));
}

/// Exact value of the low 4 bits of `code` (higher bits are ignored); code 8 is -0.
inline NW_HD float DecodeE2M1(uint8_t code) {
  const uint32_t exp = (code >> 1) & 0x3u;
  const uint32_t man = code & 0x1u;
  // In units of 0.5: exponent 0 is subnormal (0 or 1 unit), else (2 + man) << (exp - 1).
  const uint32_t halves = exp == 0u ? man : (2u + man) << (exp - 1u);
  const float magnitude = static_cast<float>(halves) * 0.5f;
  return FloatFromBits(FloatBits(magnitude) | (static_cast<uint32_t>(code & 0x8u) << 28));
}

// ---- ue8m0 (float8_e8m0fnu) ---------------------------------------------------------------------
/// 2^(b-127); NaN for 0xFF; byte 0 is 2^-127, an fp32 subnormal.
inline NW_HD float DecodeUe8m0(uint8_t b) {
  if (b == 0xFFu) return QuietNan();
  if (b == 0u) return FloatFromBits(0x00400000u);
  return FloatFromBits(static_cast<uint32_t>(b) << 23);
}

/// ue8m0 byte of 2^ceil(log2(max(amax, qmax*2^-126) / qmax)), the smallest power of two that
/// keeps amax/scale <= qmax. amax is a block's max |x| (a negative amax counts as 0); qmax > 0
/// and qmax*2^-126 must be a normal float (true for 6 and 448), so the byte is in [1, 254].
/// NaN or infinite amax, or a scale above 2^127, gives 0xFF (NaN): the block dequantizes to NaN.
inline NW_HD uint8_t Ue8m0ScaleFor(float amax, float qmax) {
  if (IsNanBits(FloatBits(amax))) return 0xFFu;
  const float floor = qmax * 0x1p-126f;
  const float a = amax > floor ? amax : floor;
  const uint32_t q = FloatBits(a / qmax);
  if (q >= 0x7F800000u) return 0xFFu;
  // q is a positive normal float: ceil(log2 q) + 127 = biased exponent, plus 1 unless q is an
  // exact power of two.
  const uint32_t byte = (q >> 23) + ((q & 0x7FFFFFu) != 0u ? 1u : 0u);
  return static_cast<uint8_t>(byte > 254u ? 0xFFu : byte);
}

}  // namespace nw::quant
