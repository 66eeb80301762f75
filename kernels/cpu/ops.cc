#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace nw::cpu {

namespace {

// One output of Linear: x . w over `in` values. Four partial sums keep the dependency chain
// short; the order is fixed, so results are deterministic run to run and the same for every
// caller (Linear and LinearRows share it).
inline float LinearDot(const float* xr, const float* wr, int64_t in) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= in; i += 4) {
    s0 += xr[i] * wr[i];
    s1 += xr[i + 1] * wr[i + 1];
    s2 += xr[i + 2] * wr[i + 2];
    s3 += xr[i + 3] * wr[i + 3];
  }
  for (; i < in; ++i) s0 += xr[i] * wr[i];
  return (s0 + s1) + (s2 + s3);
}

}  // namespace

void Linear(const float* x, int64_t tokens, int64_t in, const float* w, int64_t out, float* y) {
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xr = x + t * in;
    for (int64_t o = 0; o < out; ++o) y[t * out + o] = LinearDot(xr, w + o * in, in);
  }
}

namespace {

#if defined(__SSE2__)
// LinearDot with its four partial sums as the four lanes of one SSE register: lane k does exactly
// the scalar s_k's multiplies and adds, in the same order (SSE arithmetic is IEEE single, as the
// scalar code; neither is contracted into FMA without -mfma), so the results are bit-identical
// to LinearDot's.
inline float FinishLanes(__m128 acc, const float* x, const float* wr, int64_t i, int64_t in) {
  alignas(16) float s[4];
  _mm_store_ps(s, acc);
  for (; i < in; ++i) s[0] += x[i] * wr[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

inline float LinearDot1(const float* x, const float* wr, int64_t in) {
  __m128 a = _mm_setzero_ps();
  int64_t i = 0;
  for (; i + 4 <= in; i += 4)
    a = _mm_add_ps(a, _mm_mul_ps(_mm_loadu_ps(x + i), _mm_loadu_ps(wr + i)));
  return FinishLanes(a, x, wr, i, in);
}

// Four rows against one weight row, each weight load shared by the four.
inline void LinearDot4(const float* x0, const float* x1, const float* x2, const float* x3,
                       const float* wr, int64_t in, float* y0, float* y1, float* y2, float* y3) {
  __m128 a = _mm_setzero_ps(), b = _mm_setzero_ps(), c = _mm_setzero_ps(), d = _mm_setzero_ps();
  int64_t i = 0;
  for (; i + 4 <= in; i += 4) {
    const __m128 w4 = _mm_loadu_ps(wr + i);
    a = _mm_add_ps(a, _mm_mul_ps(_mm_loadu_ps(x0 + i), w4));
    b = _mm_add_ps(b, _mm_mul_ps(_mm_loadu_ps(x1 + i), w4));
    c = _mm_add_ps(c, _mm_mul_ps(_mm_loadu_ps(x2 + i), w4));
    d = _mm_add_ps(d, _mm_mul_ps(_mm_loadu_ps(x3 + i), w4));
  }
  *y0 = FinishLanes(a, x0, wr, i, in);
  *y1 = FinishLanes(b, x1, wr, i, in);
  *y2 = FinishLanes(c, x2, wr, i, in);
  *y3 = FinishLanes(d, x3, wr, i, in);
}
#else
inline float LinearDot1(const float* x, const float* wr, int64_t in) {
  return LinearDot(x, wr, in);
}
inline void LinearDot4(const float* x0, const float* x1, const float* x2, const float* x3,
                       const float* wr, int64_t in, float* y0, float* y1, float* y2, float* y3) {
  *y0 = LinearDot(x0, wr, in);
  *y1 = LinearDot(x1, wr, in);
  *y2 = LinearDot(x2, wr, in);
  *y3 = LinearDot(x3, wr, in);
}
#endif

}  // namespace

void LinearRows(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y) {
  // Blocks of rows small enough to stay in cache while every weight row passes over them; within
  // a block, four rows at a time share each weight load.
  constexpr int64_t kBlock = 16;
  for (int64_t t0 = 0; t0 < rows; t0 += kBlock) {
    const int64_t t1 = std::min(rows, t0 + kBlock);
    for (int64_t o = 0; o < out; ++o) {
      const float* wr = w + o * in;
      int64_t t = t0;
      for (; t + 4 <= t1; t += 4) {
        LinearDot4(x + t * in, x + (t + 1) * in, x + (t + 2) * in, x + (t + 3) * in, wr, in,
                   y + t * out + o, y + (t + 1) * out + o, y + (t + 2) * out + o,
                   y + (t + 3) * out + o);
      }
      for (; t < t1; ++t) y[t * out + o] = LinearDot1(x + t * in, wr, in);
    }
  }
}

void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* y) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float r = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * r * (w ? w[i] : 1.0f);
}

}  // namespace nw::cpu
