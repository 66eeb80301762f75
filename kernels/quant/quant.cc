// Block formats of DeepSeek-V4 on top of the scalar codecs in scalar.h. See quant.h.
#include "kernels/quant/quant.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace nw::quant {
namespace {

/// max |x_i| over n values; NaN if any value is NaN (torch's amax), 0 for n == 0.
float AbsMax(const float* x, size_t n) {
  float m = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (std::isnan(a)) return QuietNan();
    m = std::max(m, a);
  }
  return m;
}

/// One FP8 block: ue8m0 scale from the block's amax, e4m3 codes, dequantized.
void FakeQuantFp8Block(const float* x, float* y, size_t n) {
  const float s = DecodeUe8m0(Ue8m0ScaleFor(AbsMax(x, n), kE4M3Max));
  for (size_t i = 0; i < n; ++i) y[i] = DecodeE4M3(EncodeE4M3(x[i] / s)) * s;
}

/// One MXFP4 block: ue8m0 scale from the block's amax, e2m1 codes, dequantized.
void FakeQuantMxfp4Block(const float* x, float* y, size_t n) {
  const float s = DecodeUe8m0(Ue8m0ScaleFor(AbsMax(x, n), kE2M1Max));
  for (size_t i = 0; i < n; ++i) y[i] = DecodeE2M1(EncodeE2M1(x[i] / s)) * s;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

void FakeQuantBf16(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = RoundBf16(x[i]);
}

void FakeQuantFp8(const float* x, float* y, size_t n, size_t block) {
  if (block == 0) block = n;
  for (size_t i = 0; i < n; i += block) {
    FakeQuantFp8Block(x + i, y + i, std::min(block, n - i));
  }
}

void FakeQuantMxfp4(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; i += kMxfp4Block) {
    FakeQuantMxfp4Block(x + i, y + i, std::min(kMxfp4Block, n - i));
  }
}

void FakeQuantNvfp4(const float* x, float* y, size_t n) {
  const float amax = AbsMax(x, n);
  if (!std::isfinite(amax)) {
    std::fill(y, y + n, QuietNan());
    return;
  }
  const float s_global = amax / (kE4M3Max * kE2M1Max);
  if (s_global == 0.0f) {  // all zeros (or so small that the global scale underflows)
    for (size_t i = 0; i < n; ++i) y[i] = std::copysign(0.0f, x[i]);
    return;
  }
  const float six_s_global = kE2M1Max * s_global;
  for (size_t b = 0; b < n; b += kNvfp4Block) {
    const size_t len = std::min(kNvfp4Block, n - b);
    const float s_block = DecodeE4M3(EncodeE4M3(AbsMax(x + b, len) / six_s_global));
    if (s_block == 0.0f) {  // the block's amax is below half the smallest e4m3 scale
      for (size_t i = b; i < b + len; ++i) y[i] = std::copysign(0.0f, x[i]);
      continue;
    }
    const float s = s_block * s_global;
    for (size_t i = b; i < b + len; ++i) {
      y[i] = (DecodeE2M1(EncodeE2M1(x[i] / s)) * s_block) * s_global;
    }
  }
}

void FakeQuantV4Kv(const float* x, float* y, int head_dim, int rope_dim) {
  assert(rope_dim >= 0 && rope_dim <= head_dim);
  assert((head_dim - rope_dim) % static_cast<int>(kV4KvScaleBlock) == 0);
  const size_t nope = static_cast<size_t>(head_dim - rope_dim);
  FakeQuantFp8(x, y, nope, kV4KvScaleBlock);
  FakeQuantBf16(x + nope, y + nope, static_cast<size_t>(rope_dim));
}

void DequantFp8Weight(const uint8_t* w, const uint8_t* scale, int64_t out, int64_t in, float* y) {
  const int64_t scale_cols = CeilDiv(in, kFp8WeightBlock);
  for (int64_t r = 0; r < out; ++r) {
    const uint8_t* scale_row = scale + (r / kFp8WeightBlock) * scale_cols;
    for (int64_t c = 0; c < in; ++c) {
      y[r * in + c] = DecodeE4M3(w[r * in + c]) * DecodeUe8m0(scale_row[c / kFp8WeightBlock]);
    }
  }
}

void QuantizeFp8Weight(const float* x, int64_t out, int64_t in, uint8_t* w, uint8_t* scale) {
  const int64_t scale_cols = CeilDiv(in, kFp8WeightBlock);
  for (int64_t r0 = 0; r0 < out; r0 += kFp8WeightBlock) {
    const int64_t r1 = std::min(out, r0 + kFp8WeightBlock);
    for (int64_t c0 = 0; c0 < in; c0 += kFp8WeightBlock) {
      const int64_t c1 = std::min(in, c0 + kFp8WeightBlock);
      const size_t width = static_cast<size_t>(c1 - c0);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        const float row_amax = AbsMax(x + r * in + c0, width);
        amax = std::isnan(row_amax) || std::isnan(amax) ? QuietNan() : std::max(amax, row_amax);
      }
      const uint8_t byte = Ue8m0ScaleFor(amax, kE4M3Max);
      scale[(r0 / kFp8WeightBlock) * scale_cols + c0 / kFp8WeightBlock] = byte;
      const float s = DecodeUe8m0(byte);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) w[r * in + c] = EncodeE4M3(x[r * in + c] / s);
      }
    }
  }
}

void DequantFp4Weight(const uint8_t* w, const uint8_t* scale, int64_t out, int64_t in, float* y) {
  assert(in % 2 == 0);
  const int64_t groups = CeilDiv(in, kFp4WeightGroup);
  for (int64_t r = 0; r < out; ++r) {
    const uint8_t* w_row = w + r * (in / 2);
    for (int64_t c = 0; c < in; ++c) {
      const uint8_t code = static_cast<uint8_t>(w_row[c / 2] >> ((c % 2) * 4)) & 0xFu;
      y[r * in + c] = DecodeE2M1(code) * DecodeUe8m0(scale[r * groups + c / kFp4WeightGroup]);
    }
  }
}

void QuantizeFp4Weight(const float* x, int64_t out, int64_t in, uint8_t* w, uint8_t* scale) {
  assert(in % 2 == 0);
  const int64_t groups = CeilDiv(in, kFp4WeightGroup);
  for (int64_t r = 0; r < out; ++r) {
    const float* x_row = x + r * in;
    uint8_t* w_row = w + r * (in / 2);
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * kFp4WeightGroup;
      const int64_t c1 = std::min(in, c0 + kFp4WeightGroup);
      const uint8_t byte =
          Ue8m0ScaleFor(AbsMax(x_row + c0, static_cast<size_t>(c1 - c0)), kE2M1Max);
      scale[r * groups + g] = byte;
      const float s = DecodeUe8m0(byte);
      for (int64_t c = c0; c < c1; c += 2) {  // groups are even, so pairs never straddle them
        const uint8_t lo = EncodeE2M1(x_row[c] / s);
        const uint8_t hi = EncodeE2M1(x_row[c + 1] / s);
        w_row[c / 2] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
}

}  // namespace nw::quant
