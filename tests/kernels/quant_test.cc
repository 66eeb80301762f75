// Tests of kernels/quant: the DeepSeek-V4 number formats, bit-exact. Expected values are worked by
// hand (comments show the arithmetic) or come from independent brute-force oracles (nearest
// representable value by exhaustive search, in double); random inputs use a fixed seed and only
// std::mt19937's raw output, which the standard pins down.
#include "kernels/quant/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace nw::quant {
namespace {

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

// Bitwise equality that also distinguishes -0 from +0 and accepts any NaN for a NaN.
void ExpectSameFloat(float want, float got, const char* what, size_t i) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << "[" << i << "]: want NaN, got " << got;
  } else {
    EXPECT_EQ(Bits(want), Bits(got)) << what << "[" << i << "]: want " << want << ", got " << got;
  }
}

void ExpectSameFloats(const std::vector<float>& want, const std::vector<float>& got,
                      const char* what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) ExpectSameFloat(want[i], got[i], what, i);
}

// ---- Independent oracles (double arithmetic, exhaustive search) ---------------------------------

// Nearest code among the non-negative codes 0..max_code of a format whose values are listed in
// increasing order, ties to the even code (= even mantissa); saturating above the largest.
uint8_t NearestCode(double a, const std::vector<double>& values) {
  uint8_t best = 0;
  for (size_t c = 1; c < values.size(); ++c) {
    const double d_best = std::fabs(a - values[best]);
    const double d = std::fabs(a - values[c]);
    if (d < d_best || (d == d_best && c % 2 == 0)) best = static_cast<uint8_t>(c);
  }
  return best;
}

std::vector<double> E4M3Magnitudes() {  // codes 0x00..0x7E
  std::vector<double> v;
  for (int c = 0; c <= 0x7E; ++c) {
    const int e = c >> 3, m = c & 7;
    v.push_back(e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 7 - 3));
  }
  return v;
}

std::vector<double> E2M1Magnitudes() { return {0, 0.5, 1, 1.5, 2, 3, 4, 6}; }

uint8_t OracleE4M3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  return sign | NearestCode(std::fabs(static_cast<double>(x)), E4M3Magnitudes());
}

uint8_t OracleE2M1(float x) {
  const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  return sign | NearestCode(std::fabs(static_cast<double>(x)), E2M1Magnitudes());
}

uint16_t OracleBf16(float x) {  // finite x whose rounding does not overflow
  const uint32_t lo = Bits(x) & 0xFFFF0000u;
  const uint32_t hi = lo + 0x10000u;
  const double d_lo = std::fabs(static_cast<double>(x) - FromBits(lo));
  const double d_hi = std::fabs(static_cast<double>(x) - FromBits(hi));
  const bool up = d_hi < d_lo || (d_hi == d_lo && ((lo >> 16) & 1u) != 0u);
  return static_cast<uint16_t>((up ? hi : lo) >> 16);
}

// A random float with a uniformly random exponent in [emin, emax] and random sign and mantissa.
float RandomFloat(std::mt19937& g, int emin, int emax) {
  const uint32_t e =
      static_cast<uint32_t>(emin + 127) + g() % static_cast<uint32_t>(emax - emin + 1);
  return FromBits((g() & 0x807FFFFFu) | (e << 23));
}

// Uniform in [-1, 1) from 24 random bits.
float Uniform(std::mt19937& g) { return static_cast<float>(g() >> 8) * 0x1p-23f - 1.0f; }

// ---- e2m1 ---------------------------------------------------------------------------------------

TEST(E2M1, AllSixteenCodesDecodeAndReencode) {
  const float want[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (uint8_t c = 0; c < 16; ++c) {
    ExpectSameFloat(want[c], DecodeE2M1(c), "DecodeE2M1", c);
    EXPECT_EQ(EncodeE2M1(want[c]), c) << "code " << int{c};
    EXPECT_EQ(EncodeE2M1(DecodeE2M1(c)), c) << "code " << int{c};
  }
  // Bits above the nibble are ignored.
  EXPECT_EQ(DecodeE2M1(0xF3), 1.5f);
}

TEST(E2M1, RoundsToNearestEven) {
  struct Case {
    float x;
    float want;
  };
  const Case cases[] = {
      // Ties: the even code wins (codes: 0:0 1:.5 2:1 3:1.5 4:2 5:3 6:4 7:6).
      {0.25f, 0.0f},
      {0.75f, 1.0f},
      {1.25f, 1.0f},
      {1.75f, 2.0f},
      {2.5f, 2.0f},
      {3.5f, 4.0f},
      {5.0f, 4.0f},
      {-2.5f, -2.0f},
      {-5.0f, -4.0f},
      {-0.25f, -0.0f},
      // Off ties: the nearest.
      {0.26f, 0.5f},
      {0.74f, 0.5f},
      {2.51f, 3.0f},
      {4.99f, 4.0f},
      {5.01f, 6.0f},
      {0.1f, 0.0f},
      // Saturation.
      {6.0f, 6.0f},
      {7.0f, 6.0f},
      {1e30f, 6.0f},
      {-100.0f, -6.0f},
      {std::numeric_limits<float>::infinity(), 6.0f},
      {-std::numeric_limits<float>::infinity(), -6.0f},
      // Zeros and fp32 subnormals.
      {0.0f, 0.0f},
      {-0.0f, -0.0f},
      {1e-40f, 0.0f},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    ExpectSameFloat(cases[i].want, DecodeE2M1(EncodeE2M1(cases[i].x)), "e2m1 case", i);
  }
  EXPECT_EQ(EncodeE2M1(QuietNan()), 0x7);  // no NaN in e2m1: +6, as CUDA's cvt does
  EXPECT_EQ(EncodeE2M1(-QuietNan()), 0x7);
}

TEST(E2M1, MatchesBruteForceOracle) {
  std::vector<float> xs;
  const std::vector<double> mags = E2M1Magnitudes();
  for (size_t c = 0; c + 1 < mags.size(); ++c) {  // every midpoint and its fp32 neighbours
    const float mid = static_cast<float>((mags[c] + mags[c + 1]) / 2);
    for (float m : {mid, -mid}) {
      xs.push_back(m);
      xs.push_back(std::nextafter(m, 0.0f));
      xs.push_back(std::nextafter(m, 2 * m));
    }
  }
  std::mt19937 g(1234);
  for (int i = 0; i < 100000; ++i) xs.push_back(RandomFloat(g, -4, 3));
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_EQ(EncodeE2M1(xs[i]), OracleE2M1(xs[i])) << "x = " << xs[i];
  }
}

// ---- e4m3 ---------------------------------------------------------------------------------------

TEST(E4M3, HandWorkedEncodings) {
  struct Case {
    float x;
    uint8_t want;
  };
  const Case cases[] = {
      {448.0f, 0x7E},         // 1.75 * 2^8: S.1111.110
      {464.0f, 0x7E},         // tie 448/480 -> even mantissa (480 would be the NaN pattern)
      {470.0f, 0x7E},         // nearer 480: saturates (torch would give NaN from 480 up)
      {1e6f, 0x7E},           // saturates
      {416.0f, 0x7D},         // 1.625 * 2^8
      {0x1p-6f, 0x08},        // smallest normal: E=1, M=0
      {0x1p-9f, 0x01},        // smallest subnormal
      {0x1p-10f, 0x00},       // tie 0 / 2^-9 -> 0 (even)
      {0x1.8p-10f, 0x01},     // 0.75 * 2^-9 -> 2^-9
      {3 * 0x1p-10f, 0x02},   // 1.5 * 2^-9: tie 1 / 2 units -> 2 units = 2^-8
      {5 * 0x1p-10f, 0x02},   // 2.5 units: tie 2 / 3 -> 2 = 2^-8
      {15 * 0x1p-10f, 0x08},  // 7.5 units: tie 7 / 8 -> 8 units = 2^-6, the first normal
      {1.0f, 0x38},           // E=7, M=0
      {1.0625f, 0x38},        // tie 1.0 / 1.125 -> 1.0 (M=0 even)
      {1.1875f, 0x3A},        // tie 1.125 / 1.25 -> 1.25 (M=2 even)
      {1.1f, 0x39},           // nearest 1.125
      {240.0f, 0x77},         // 1.875 * 2^7
      {-1.0f, 0xB8},          // sign bit
      {-448.0f, 0xFE},        // -max
      {-1e6f, 0xFE},          // saturates negative
      {-1.0625f, 0xB8},       // negative tie
      {-3 * 0x1p-10f, 0x82},  // negative subnormal tie
      {-0x1p-10f, 0x80},      // rounds to -0
      {0.0f, 0x00},           // +0
      {-0.0f, 0x80},          // -0 preserved
      {1e-40f, 0x00},         // fp32 subnormal
      {std::numeric_limits<float>::infinity(), 0x7E},
      {-std::numeric_limits<float>::infinity(), 0xFE},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(EncodeE4M3(c.x), c.want) << "x = " << c.x;
  }
  EXPECT_EQ(EncodeE4M3(QuietNan()), 0x7F);
  EXPECT_EQ(EncodeE4M3(-QuietNan()), 0xFF);
  EXPECT_EQ(EncodeE4M3(FromBits(0x7F800001u)), 0x7F);  // signalling NaN
}

TEST(E4M3, AllCodesDecodeAndRoundTrip) {
  EXPECT_EQ(DecodeE4M3(0x01), 0x1p-9f);
  EXPECT_EQ(DecodeE4M3(0x07), 7 * 0x1p-9f);
  EXPECT_EQ(DecodeE4M3(0x08), 0x1p-6f);
  EXPECT_EQ(DecodeE4M3(0x38), 1.0f);
  EXPECT_EQ(DecodeE4M3(0x3A), 1.25f);
  EXPECT_EQ(DecodeE4M3(0x7D), 416.0f);
  EXPECT_EQ(DecodeE4M3(0x7E), 448.0f);
  EXPECT_EQ(DecodeE4M3(0xFE), -448.0f);
  EXPECT_EQ(Bits(DecodeE4M3(0x80)), 0x80000000u);  // -0
  const std::vector<double> mags = E4M3Magnitudes();
  for (int b = 0; b < 256; ++b) {
    const float v = DecodeE4M3(static_cast<uint8_t>(b));
    const bool nan_code = (b & 0x7F) == 0x7F;
    EXPECT_EQ(std::isnan(v), nan_code) << "code " << b;
    if (nan_code) continue;
    EXPECT_EQ(std::signbit(v), b >= 0x80) << "code " << b;
    EXPECT_EQ(static_cast<double>(std::fabs(v)), mags[b & 0x7F]) << "code " << b;
    EXPECT_EQ(EncodeE4M3(v), b) << "code " << b;
  }
}

TEST(E4M3, MatchesBruteForceOracle) {
  std::vector<float> xs;
  const std::vector<double> mags = E4M3Magnitudes();
  for (size_t c = 0; c + 1 < mags.size(); ++c) {  // every midpoint and its fp32 neighbours
    const float mid = static_cast<float>((mags[c] + mags[c + 1]) / 2);
    for (float m : {mid, -mid}) {
      xs.push_back(m);
      xs.push_back(std::nextafter(m, 0.0f));
      xs.push_back(std::nextafter(m, 2 * m));
    }
  }
  std::mt19937 g(5678);
  for (int i = 0; i < 200000; ++i) xs.push_back(RandomFloat(g, -14, 9));
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_EQ(EncodeE4M3(xs[i]), OracleE4M3(xs[i])) << "x = " << xs[i];
  }
}

// ---- bf16 ---------------------------------------------------------------------------------------

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3F808000u)), 0x3F80);  // 1 + 2^-8: tie -> even (down)
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3F818000u)), 0x3F82);  // tie, odd mantissa -> up
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3F808001u)), 0x3F81);  // above the tie
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x3F807FFFu)), 0x3F80);  // below the tie
  EXPECT_EQ(FloatToBf16Bits(FromBits(0xBF818000u)), 0xBF82);  // negative tie
  EXPECT_EQ(FloatToBf16Bits(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16Bits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBf16Bits(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(FloatToBf16Bits(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(FloatToBf16Bits(std::numeric_limits<float>::max()), 0x7F80);  // rounds to inf
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x7F7F7FFFu)), 0x7F7F);              // largest below it
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x00018000u)), 0x0002);              // subnormal tie, odd
  // NaN stays NaN and becomes quiet, even when truncation would give inf (0x7F800001).
  EXPECT_EQ(FloatToBf16Bits(FromBits(0x7F800001u)), 0x7FC0);
  EXPECT_EQ(FloatToBf16Bits(FromBits(0xFFC00000u)), 0x7FC0);
  EXPECT_TRUE(std::isnan(RoundBf16(FromBits(0x7F800001u))));
  EXPECT_EQ(Bf16BitsToFloat(0x3F82), FromBits(0x3F820000u));
  EXPECT_EQ(RoundBf16(FromBits(0x3F818000u)), FromBits(0x3F820000u));
}

TEST(Bf16, MatchesBruteForceOracle) {
  std::mt19937 g(91011);
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = g();
    if (i % 4 == 0) u = (u & 0xFFFF0000u) | 0x8000u;  // exact ties
    const float x = FromBits(u);
    if (!std::isfinite(x) || (u & 0x7FFFFFFFu) >= 0x7F7F8000u) continue;  // oracle: no overflow
    ASSERT_EQ(FloatToBf16Bits(x), OracleBf16(x)) << std::hex << "bits 0x" << u;
  }
}

// ---- ue8m0 --------------------------------------------------------------------------------------

TEST(Ue8m0, Decode) {
  EXPECT_EQ(DecodeUe8m0(127), 1.0f);
  EXPECT_EQ(DecodeUe8m0(128), 2.0f);
  EXPECT_EQ(DecodeUe8m0(120), 0x1p-7f);
  EXPECT_EQ(DecodeUe8m0(1), 0x1p-126f);
  EXPECT_EQ(DecodeUe8m0(0), 0x1p-127f);  // fp32 subnormal
  EXPECT_EQ(DecodeUe8m0(254), 0x1p127f);
  EXPECT_TRUE(std::isnan(DecodeUe8m0(255)));
}

TEST(Ue8m0, ScaleChoice) {
  // amax exactly qmax * 2^k -> 2^k (no rounding up at powers of two).
  EXPECT_EQ(Ue8m0ScaleFor(448.0f, 448.0f), 127);
  EXPECT_EQ(Ue8m0ScaleFor(896.0f, 448.0f), 128);
  EXPECT_EQ(Ue8m0ScaleFor(56.0f, 448.0f), 124);  // 448 * 2^-3
  EXPECT_EQ(Ue8m0ScaleFor(6.0f, 6.0f), 127);
  EXPECT_EQ(Ue8m0ScaleFor(3.0f, 6.0f), 126);
  EXPECT_EQ(Ue8m0ScaleFor(6.0f * 0x1p-20f, 6.0f), 107);
  // Just above -> the next power.
  EXPECT_EQ(Ue8m0ScaleFor(std::nextafter(448.0f, 1e9f), 448.0f), 128);
  EXPECT_EQ(Ue8m0ScaleFor(std::nextafter(6.0f, 1e9f), 6.0f), 128);
  // Just below -> the same power.
  EXPECT_EQ(Ue8m0ScaleFor(std::nextafter(448.0f, 0.0f), 448.0f), 127);
  // In between: 1/448 = 2^-8.8 -> 2^-8 (448 * 2^-8 = 1.75 >= 1 > 448 * 2^-9 = 0.875).
  EXPECT_EQ(Ue8m0ScaleFor(1.0f, 448.0f), 119);
  EXPECT_EQ(Ue8m0ScaleFor(1.0f, 6.0f), 125);  // 1/6 = 2^-2.58 -> 2^-2
  EXPECT_EQ(Ue8m0ScaleFor(5.0f, 6.0f), 127);  // 5/6 -> 2^0
  // Zero, negative and tiny amax hit the floor qmax * 2^-126 -> 2^-126.
  EXPECT_EQ(Ue8m0ScaleFor(0.0f, 448.0f), 1);
  EXPECT_EQ(Ue8m0ScaleFor(0.0f, 6.0f), 1);
  EXPECT_EQ(Ue8m0ScaleFor(-1.0f, 6.0f), 1);
  EXPECT_EQ(Ue8m0ScaleFor(1e-40f, 448.0f), 1);
  EXPECT_EQ(Ue8m0ScaleFor(448.0f * 0x1p-126f, 448.0f), 1);
  EXPECT_EQ(Ue8m0ScaleFor(448.0f * 0x1p-125f, 448.0f), 2);
  // Largest amax: FLT_MAX / 6 < 2^126.
  EXPECT_EQ(Ue8m0ScaleFor(std::numeric_limits<float>::max(), 6.0f), 253);
  // NaN / inf -> NaN scale.
  EXPECT_EQ(Ue8m0ScaleFor(QuietNan(), 448.0f), 255);
  EXPECT_EQ(Ue8m0ScaleFor(std::numeric_limits<float>::infinity(), 448.0f), 255);
}

// DeepSeek's kernels compute fast_log2_ceil(max(amax, floor) * fp32(1/qmax)); we divide. For the
// two qmax in use the exponent is the same for every fp32 amax; check it on many.
TEST(Ue8m0, MatchesDeepSeekReciprocalFormula) {
  std::mt19937 g(4242);
  for (float qmax : {448.0f, 6.0f}) {
    const float inv = 1.0f / qmax;
    const float floor = qmax * 0x1p-126f;
    std::vector<float> amaxes;
    for (int k = -126; k < 120; ++k) {  // qmax * 2^k and its neighbours
      const float p = std::ldexp(qmax, k);
      amaxes.insert(amaxes.end(), {p, std::nextafter(p, 0.0f), std::nextafter(p, 1e38f)});
    }
    for (int i = 0; i < 200000; ++i) amaxes.push_back(std::fabs(RandomFloat(g, -126, 120)));
    for (float amax : amaxes) {
      const uint32_t q = Bits(std::max(amax, floor) * inv);
      const uint32_t deepseek = (q >> 23) + ((q & 0x7FFFFFu) != 0u ? 1u : 0u);
      ASSERT_EQ(Ue8m0ScaleFor(amax, qmax), deepseek) << "amax " << amax << " qmax " << qmax;
    }
  }
}

// ---- Block formats: hand-worked -----------------------------------------------------------------

TEST(FakeQuantFp8, HandWorkedBlocks) {
  // Block 0 {3, -1.1, 0.02, 0}: amax 3, 3/448 = 2^-7.2 -> s = 2^-7. x/s = 384 (exact),
  //   -140.8 -> -144 (step 16), 2.56 -> 2.5 (step 0.25), 0.
  // Block 1 (partial) {0.5, 0.1}: 0.5/448 = 2^-9.8 -> s = 2^-9. x/s = 256, 51.2 -> 52 (step 4).
  const std::vector<float> x = {3.0f, -1.1f, 0.02f, 0.0f, 0.5f, 0.1f};
  const std::vector<float> want = {3.0f, -1.125f, 2.5f / 128, 0.0f, 0.5f, 52.0f / 512};
  std::vector<float> y(x.size());
  FakeQuantFp8(x.data(), y.data(), x.size(), 4);
  ExpectSameFloats(want, y, "fp8");
  std::vector<float> inplace = x;
  FakeQuantFp8(inplace.data(), inplace.data(), inplace.size(), 4);
  ExpectSameFloats(want, inplace, "fp8 in place");
  // block 0: one block of all six values: amax 3 -> s = 2^-7; 0.5 -> 64, 0.1 -> 12.8 -> 13.
  FakeQuantFp8(x.data(), y.data(), x.size(), 0);
  ExpectSameFloats({3.0f, -1.125f, 2.5f / 128, 0.0f, 0.5f, 13.0f / 128}, y, "fp8 block 0");
}

TEST(FakeQuantFp8, NanAndInfPoisonOnlyTheirBlock) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {1.0f, QuietNan(), 2.0f, 448.0f, -inf, 0.0f, 1.0f, 1.0f};
  std::vector<float> y(x.size());
  FakeQuantFp8(x.data(), y.data(), x.size(), 2);
  const float nan = QuietNan();
  ExpectSameFloats({nan, nan, 2.0f, 448.0f, nan, nan, 1.0f, 1.0f}, y, "fp8 nan");
}

TEST(FakeQuantMxfp4, HandWorkedBlocks) {
  // Block 0 (32 values): amax 5, 5/6 -> s = 2^0; values are rounded as plain e2m1.
  // Block 1 (3 values) {0.7, 0.3, -0.05}: 0.7/6 = 2^-3.1 -> s = 2^-3; x/s = 5.6 -> 6,
  //   2.4 -> 2, -0.4 -> -0.5.
  std::vector<float> x(35, 0.0f), want(35, 0.0f);
  const float b0[] = {5.0f, 2.5f, 0.25f, -0.75f, 1.25f, 3.5f, -1.75f, 0.1f, 2.6f, -5.0f, 0.3f};
  const float w0[] = {4.0f, 2.0f, 0.0f, -1.0f, 1.0f, 4.0f, -2.0f, 0.0f, 3.0f, -4.0f, 0.5f};
  std::copy(std::begin(b0), std::end(b0), x.begin());
  std::copy(std::begin(w0), std::end(w0), want.begin());
  x[32] = 0.7f, x[33] = 0.3f, x[34] = -0.05f;
  want[32] = 0.75f, want[33] = 0.25f, want[34] = -0.0625f;
  std::vector<float> y(x.size());
  FakeQuantMxfp4(x.data(), y.data(), x.size());
  ExpectSameFloats(want, y, "mxfp4");
}

TEST(FakeQuantNvfp4, HandWorkedBlocks) {
  // amax_tensor 2688 -> s_global = 2688 / (448 * 6) = 1.
  // Block 0: amax 2688 -> s_block = e4m3(448) = 448. x/s = 6 -> 6, 2.23 -> 2, -0.67 -> -0.5.
  // Block 1: amax 10 -> 10/6 = 1.667 -> e4m3 1.625 (step 0.125). x/s = 6.15 -> 6 (saturates),
  //   1.85 -> 2, -0.615 -> -0.5.
  // Block 2: amax 0.02 -> 0.02/6 = 1.71 * 2^-9 -> e4m3 subnormal 2 * 2^-9 = 2^-8. x/s = 5.12 -> 6,
  //   -0.768 -> -1.
  // Block 3 (partial, 8): amax 0.001 -> 0.001/6 < 2^-10 -> e4m3 0: the block is zeros.
  std::vector<float> x(56, 0.0f), want(56, 0.0f);
  x[0] = 2688.0f, x[1] = 1000.0f, x[2] = -300.0f;
  want[0] = 2688.0f, want[1] = 896.0f, want[2] = -224.0f;
  x[16] = 10.0f, x[17] = 3.0f, x[18] = -1.0f;
  want[16] = 9.75f, want[17] = 3.25f, want[18] = -0.8125f;
  x[32] = 0.02f, x[33] = -0.003f;
  want[32] = 6 * 0x1p-8f, want[33] = -0x1p-8f;
  x[48] = 0.001f, x[49] = -0.0005f;
  want[48] = 0.0f, want[49] = -0.0f;
  std::vector<float> y(x.size());
  FakeQuantNvfp4(x.data(), y.data(), x.size());
  ExpectSameFloats(want, y, "nvfp4");
  FakeQuantNvfp4(x.data(), x.data(), x.size());
  ExpectSameFloats(want, x, "nvfp4 in place");
}

TEST(FakeQuantNvfp4, ZeroAndNonFiniteTensors) {
  std::vector<float> x = {0.0f, -0.0f, 0.0f};
  std::vector<float> y(3, 1.0f);
  FakeQuantNvfp4(x.data(), y.data(), x.size());
  ExpectSameFloats({0.0f, -0.0f, 0.0f}, y, "nvfp4 zeros");
  const float nan = QuietNan();
  x = {1.0f, nan, 2.0f};
  FakeQuantNvfp4(x.data(), y.data(), x.size());
  ExpectSameFloats({nan, nan, nan}, y, "nvfp4 nan");
  x = {1.0f, -std::numeric_limits<float>::infinity(), 2.0f};
  FakeQuantNvfp4(x.data(), y.data(), x.size());
  ExpectSameFloats({nan, nan, nan}, y, "nvfp4 inf");
}

TEST(FakeQuantV4Kv, HandWorkedToken) {
  // head_dim 192 = 128 nope (two e4m3 blocks of 64) + 64 rope (bf16).
  std::vector<float> x(192, 0.0f), want(192, 0.0f);
  // Nope block 0: amax 100, 100/448 = 2^-2.16 -> s = 2^-2.
  //   100 -> 400: tie 384 (M=4) / 416 (M=5) -> 384 -> 96.
  //   -0.3 -> -1.2 -> -1.25 (step 0.125) -> -0.3125.
  //   0.001 -> 0.004 = 2.05 * 2^-9 -> 2 * 2^-9 -> 2^-10.
  x[0] = 100.0f, x[1] = -0.3f, x[63] = 0.001f;
  want[0] = 96.0f, want[1] = -0.3125f, want[63] = 0x1p-10f;
  // Nope block 1: amax 2^-20 * 1.015625 -> s = 2^-28 (448 * 2^-29 < amax <= 448 * 2^-28).
  //   -2^-20 -> -256 exactly; 2^-20 * 1.015625 -> 260 -> 256 (step 32).
  x[64] = -0x1p-20f, x[65] = 0x1p-20f * 1.015625f;
  want[64] = -0x1p-20f, want[65] = 0x1p-20f;
  // Rope: bf16 round to nearest even, no scale.
  x[128] = FromBits(0x3F808000u), want[128] = 1.0f;
  x[129] = FromBits(0x3F818000u), want[129] = FromBits(0x3F820000u);
  x[130] = FromBits(0x3F808001u), want[130] = FromBits(0x3F810000u);
  x[131] = 100.0f, want[131] = 100.0f;
  x[191] = -0.3f, want[191] = FromBits(0xBE9A0000u);  // -0.3 = 0xBE99999A -> 0xBE9A
  std::vector<float> y(192);
  FakeQuantV4Kv(x.data(), y.data(), 192, 64);
  ExpectSameFloats(want, y, "v4 kv");
  // The V4 shape: 448 nope + 64 rope; dims 448.. are bf16 only, not e4m3.
  std::vector<float> full(512, 0.0f), out(512);
  full[0] = 1.0f, full[448] = 0.3f;
  FakeQuantV4Kv(full.data(), out.data(), 512, 64);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[448], FromBits(0x3E9A0000u));  // 0.3 = 0x3E99999A -> bf16 0x3E9A
  // As e4m3 it would be 0.3125: s = 2^-10, 0.3 * 1024 = 307.2 -> 320 (step 32).
  float as_e4m3 = 0.0f;
  FakeQuantFp8(&full[448], &as_e4m3, 1, 64);
  EXPECT_EQ(as_e4m3, 0.3125f);
}

// ---- Weights ------------------------------------------------------------------------------------

TEST(Fp8Weight, HandWorked) {
  // [1, 3] {1, -0.3, 500}: amax 500, 500/448 = 2^0.16 -> s = 2 (byte 128).
  //   0.5 -> 0x30 (E=6); -0.15 -> -0.15625 (step 2^-6) -> 0xA2; 250 -> 256 (step 16) -> 0x78.
  const float x[3] = {1.0f, -0.3f, 500.0f};
  uint8_t w[3], scale[1];
  QuantizeFp8Weight(x, 1, 3, w, scale);
  EXPECT_EQ(scale[0], 128);
  EXPECT_EQ(w[0], 0x30);
  EXPECT_EQ(w[1], 0xA2);
  EXPECT_EQ(w[2], 0x78);
  float y[3];
  DequantFp8Weight(w, scale, 1, 3, y);
  ExpectSameFloats({1.0f, -0.3125f, 512.0f}, {y[0], y[1], y[2]}, "fp8 weight");
}

// Quantize -> dequantize of an [out, in] weight with partial edge tiles equals FakeQuantFp8 of
// each 128x128 tile's values, and the scale bytes are the tiles' power-of-two scales.
TEST(Fp8Weight, RoundTripEqualsFakeQuantOfTiles) {
  const int64_t out = 130, in = 200;  // tiles: rows {128, 2} x cols {128, 72}
  std::mt19937 g(77);
  std::vector<float> x(out * in);
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t c = 0; c < in; ++c) {  // a different magnitude per tile
      x[r * in + c] = Uniform(g) * std::ldexp(1.0f, static_cast<int>(r / 128 * 3 - c / 128 * 5));
    }
  }
  std::vector<uint8_t> w(out * in), scale(2 * 2);
  QuantizeFp8Weight(x.data(), out, in, w.data(), scale.data());
  std::vector<float> y(out * in);
  DequantFp8Weight(w.data(), scale.data(), out, in, y.data());
  for (int64_t br = 0; br < 2; ++br) {
    for (int64_t bc = 0; bc < 2; ++bc) {
      std::vector<float> tile, got;
      for (int64_t r = br * 128; r < std::min(out, br * 128 + 128); ++r) {
        for (int64_t c = bc * 128; c < std::min(in, bc * 128 + 128); ++c) {
          tile.push_back(x[r * in + c]);
          got.push_back(y[r * in + c]);
        }
      }
      float amax = 0.0f;
      for (float v : tile) amax = std::max(amax, std::fabs(v));
      EXPECT_EQ(scale[br * 2 + bc], Ue8m0ScaleFor(amax, 448.0f)) << br << "," << bc;
      std::vector<float> want(tile.size());
      FakeQuantFp8(tile.data(), want.data(), tile.size(), 0);
      ExpectSameFloats(want, got, "fp8 weight tile");
    }
  }
}

TEST(Fp4Weight, NibbleOrder) {
  // [1, 4] {0.5, -6, 3, -0}: amax 6 -> s = 1 (byte 127); codes 0x1, 0xF, 0x5, 0x8.
  // Byte j holds element 2j in the low nibble and 2j+1 in the high nibble.
  const float x[4] = {0.5f, -6.0f, 3.0f, -0.0f};
  uint8_t w[2], scale[1];
  QuantizeFp4Weight(x, 1, 4, w, scale);
  EXPECT_EQ(scale[0], 127);
  EXPECT_EQ(w[0], 0xF1);
  EXPECT_EQ(w[1], 0x85);
  float y[4];
  DequantFp4Weight(w, scale, 1, 4, y);
  ExpectSameFloats({0.5f, -6.0f, 3.0f, -0.0f}, {y[0], y[1], y[2], y[3]}, "fp4 weight");
  // Dequant reads bytes written by hand: 0x2C = {low 0xC = -2, high 0x2 = 1}, scale 2^-1.
  const uint8_t w2[1] = {0x2C}, s2[1] = {126};
  float y2[2];
  DequantFp4Weight(w2, s2, 1, 2, y2);
  EXPECT_EQ(y2[0], -1.0f);
  EXPECT_EQ(y2[1], 0.5f);
}

// Each group of 32 along a row (the last one partial) is exactly FakeQuantMxfp4 of its values.
TEST(Fp4Weight, RoundTripEqualsFakeQuantOfGroups) {
  const int64_t out = 3, in = 72;  // groups of 32, 32, 8
  std::mt19937 g(88);
  std::vector<float> x(out * in);
  for (int64_t i = 0; i < out * in; ++i) {
    x[i] = Uniform(g) * std::ldexp(1.0f, static_cast<int>(i / 32 % 7) - 3);
  }
  std::vector<uint8_t> w(out * in / 2), scale(out * 3);
  QuantizeFp4Weight(x.data(), out, in, w.data(), scale.data());
  std::vector<float> y(out * in);
  DequantFp4Weight(w.data(), scale.data(), out, in, y.data());
  for (int64_t r = 0; r < out; ++r) {
    std::vector<float> want(in);
    FakeQuantMxfp4(x.data() + r * in, want.data(), in);
    ExpectSameFloats(want, std::vector<float>(y.begin() + r * in, y.begin() + (r + 1) * in),
                     "fp4 weight row");
    for (int64_t gi = 0; gi < 3; ++gi) {
      const int64_t c0 = gi * 32, c1 = std::min<int64_t>(in, c0 + 32);
      float amax = 0.0f;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * in + c]));
      EXPECT_EQ(scale[r * 3 + gi], Ue8m0ScaleFor(amax, 6.0f)) << r << "," << gi;
    }
  }
}

// ---- Random: idempotence and error bounds -------------------------------------------------------

// n values in blocks of `block`, each block scaled by a random power of two in [2^lo, 2^hi], with
// some exact zeros.
std::vector<float> RandomBlocks(std::mt19937& g, size_t n, size_t block, int lo, int hi) {
  std::vector<float> x(n);
  for (size_t b = 0; b < n; b += block) {
    const int e = lo + static_cast<int>(g() % static_cast<uint32_t>(hi - lo + 1));
    for (size_t i = b; i < std::min(n, b + block); ++i) {
      x[i] = g() % 16 == 0 ? 0.0f : std::ldexp(Uniform(g), e);
    }
  }
  return x;
}

// max over blocks of max_i |y_i - x_i| / amax(block).
double MaxRelativeBlockError(const std::vector<float>& x, const std::vector<float>& y,
                             size_t block) {
  double worst = 0.0;
  for (size_t b = 0; b < x.size(); b += block) {
    double amax = 0.0, err = 0.0;
    for (size_t i = b; i < std::min(x.size(), b + block); ++i) {
      amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
      err = std::max(err, std::fabs(static_cast<double>(y[i]) - x[i]));
    }
    if (amax > 0) worst = std::max(worst, err / amax);
  }
  return worst;
}

using FakeQuantFn = void (*)(const float*, float*, size_t);

// FakeQuant(FakeQuant(x)) == FakeQuant(x) bit for bit; returns FakeQuant(x).
std::vector<float> CheckIdempotent(FakeQuantFn fq, const std::vector<float>& x, const char* what) {
  std::vector<float> y(x.size()), yy(x.size());
  fq(x.data(), y.data(), x.size());
  fq(y.data(), yy.data(), y.size());
  ExpectSameFloats(y, yy, what);
  return y;
}

TEST(RandomBlocks, Bf16IdempotentWithinHalfUlp) {
  std::mt19937 g(1);
  const std::vector<float> x = RandomBlocks(g, 4096, 64, -30, 30);
  const std::vector<float> y = CheckIdempotent(FakeQuantBf16, x, "bf16 idempotent");
  for (size_t i = 0; i < x.size(); ++i) {  // 8 significant bits: |err| <= 2^-8 |x|
    ASSERT_LE(std::fabs(static_cast<double>(y[i]) - x[i]), std::ldexp(std::fabs(x[i]), -8)) << i;
  }
}

TEST(RandomBlocks, Fp8IdempotentWithinBound) {
  std::mt19937 g(2);
  for (size_t block : {size_t{128}, size_t{64}, size_t{100}}) {
    const std::vector<float> x = RandomBlocks(g, 128 * 40 + 37, block, -40, 40);
    std::vector<float> y(x.size()), yy(x.size());
    FakeQuantFp8(x.data(), y.data(), x.size(), block);
    FakeQuantFp8(y.data(), yy.data(), y.size(), block);
    ExpectSameFloats(y, yy, "fp8 idempotent");
    // amax/s in (224, 448]: every value is within half an e4m3 step, <= 2^-4 of the block amax.
    const double err = MaxRelativeBlockError(x, y, block);
    EXPECT_LE(err, 0x1p-4) << "block " << block;
    EXPECT_GT(err, 0x1p-6) << "block " << block;  // the bound is not vacuous
  }
}

TEST(RandomBlocks, Mxfp4IdempotentWithinBound) {
  std::mt19937 g(3);
  const std::vector<float> x = RandomBlocks(g, 32 * 100 + 7, 32, -40, 40);
  const std::vector<float> y = CheckIdempotent(FakeQuantMxfp4, x, "mxfp4 idempotent");
  // amax/s in (3, 6]: errors are at most half a step of 2 -> 1, i.e. 1/4 of the block amax.
  const double err = MaxRelativeBlockError(x, y, 32);
  EXPECT_LE(err, 0.25);
  EXPECT_GT(err, 0.1);
}

// NVFP4 is idempotent when the global scale is a power of two (so amax_tensor = 2688 * s_global
// survives exactly) and every block scale is a normal e4m3 value (so amax_block / s_block is
// within 6 * (1 +- 2^-4) and the block's largest value comes back as code 6).
TEST(RandomBlocks, Nvfp4IdempotentWithinBound) {
  std::mt19937 g(4);
  for (int trial = 0; trial < 8; ++trial) {
    std::vector<float> x = RandomBlocks(g, 16 * 64 + 9, 16, -5, 0);
    const float s_global = std::ldexp(1.0f, trial * 3 - 12);
    for (float& v : x) v *= 2688.0f * s_global;
    x[g() % x.size()] = (trial % 2 ? -2688.0f : 2688.0f) * s_global;  // the tensor amax
    const std::vector<float> y = CheckIdempotent(FakeQuantNvfp4, x, "nvfp4 idempotent");
    // s_block within 2^-4 of amax_block/6: amax_block/s_block in [5.65, 6.4]; errors <= 1 step
    // half (1) or the saturation (0.4) in units of s_block, <= 1/5.65 of the block amax.
    const double err = MaxRelativeBlockError(x, y, 16);
    EXPECT_LE(err, 0.178) << "trial " << trial;
    EXPECT_GT(err, 0.05) << "trial " << trial;
  }
}

TEST(RandomBlocks, V4KvIdempotent) {
  std::mt19937 g(5);
  for (int token = 0; token < 16; ++token) {
    const std::vector<float> x = RandomBlocks(g, 512, 64, -20, 20);
    std::vector<float> y(512), yy(512);
    FakeQuantV4Kv(x.data(), y.data(), 512, 64);
    FakeQuantV4Kv(y.data(), yy.data(), 512, 64);
    ExpectSameFloats(y, yy, "v4 kv idempotent");
    std::vector<float> nope(448), rope(64);
    FakeQuantFp8(x.data(), nope.data(), 448, 64);
    FakeQuantBf16(x.data() + 448, rope.data(), 64);
    ExpectSameFloats(nope, std::vector<float>(y.begin(), y.begin() + 448), "v4 kv nope");
    ExpectSameFloats(rope, std::vector<float>(y.begin() + 448, y.end()), "v4 kv rope");
  }
}

// Dequantize(Quantize(.)) is idempotent for both weight formats. (The bytes need not be: a tile
// whose amax rounds down to exactly half the format's max requantizes with half the scale and
// doubled codes, the same values.)
TEST(RandomBlocks, WeightsIdempotent) {
  std::mt19937 g(6);
  const int64_t out = 257, in = 130;
  const std::vector<float> x = RandomBlocks(g, out * in, 128, -10, 10);
  std::vector<uint8_t> w(out * in), s(3 * 2);
  std::vector<float> y(out * in), yy(out * in);
  QuantizeFp8Weight(x.data(), out, in, w.data(), s.data());
  DequantFp8Weight(w.data(), s.data(), out, in, y.data());
  QuantizeFp8Weight(y.data(), out, in, w.data(), s.data());
  DequantFp8Weight(w.data(), s.data(), out, in, yy.data());
  ExpectSameFloats(y, yy, "fp8 weight idempotent");
  const int64_t in4 = 96;
  const std::vector<float> x4 = RandomBlocks(g, out * in4, 32, -10, 10);
  std::vector<uint8_t> p(out * in4 / 2), t(out * 3);
  std::vector<float> y4(out * in4), yy4(out * in4);
  QuantizeFp4Weight(x4.data(), out, in4, p.data(), t.data());
  DequantFp4Weight(p.data(), t.data(), out, in4, y4.data());
  QuantizeFp4Weight(y4.data(), out, in4, p.data(), t.data());
  DequantFp4Weight(p.data(), t.data(), out, in4, yy4.data());
  ExpectSameFloats(y4, yy4, "fp4 weight idempotent");
}

}  // namespace
}  // namespace nw::quant
