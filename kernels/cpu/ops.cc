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
// to LinearDot's. The rows are `n` inputs against one weight row, each weight load shared.
template <int n>
inline void LinearDotSse(const float* const* x, const float* wr, int64_t in, float* const* y) {
  __m128 acc[n];
  for (int r = 0; r < n; ++r) acc[r] = _mm_setzero_ps();
  int64_t i = 0;
  for (; i + 4 <= in; i += 4) {
    const __m128 w4 = _mm_loadu_ps(wr + i);
    for (int r = 0; r < n; ++r) acc[r] = _mm_add_ps(acc[r], _mm_mul_ps(_mm_loadu_ps(x[r] + i), w4));
  }
  for (int r = 0; r < n; ++r) {
    alignas(16) float s[4];
    _mm_store_ps(s, acc[r]);
    for (int64_t j = i; j < in; ++j) s[0] += x[r][j] * wr[j];
    *y[r] = (s[0] + s[1]) + (s[2] + s[3]);
  }
}
#endif

// LinearDot of `n` rows against one weight row, each weight value loaded once for all of them;
// every result bit-identical to LinearDot's.
template <int n>
inline void LinearDotRows(const float* const* x, const float* wr, int64_t in, float* const* y) {
#if defined(__SSE2__)
  LinearDotSse<n>(x, wr, in, y);
#else
  for (int r = 0; r < n; ++r) *y[r] = LinearDot(x[r], wr, in);
#endif
}

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
        const float* xs[4] = {x + t * in, x + (t + 1) * in, x + (t + 2) * in, x + (t + 3) * in};
        float* ys[4] = {y + t * out + o, y + (t + 1) * out + o, y + (t + 2) * out + o,
                        y + (t + 3) * out + o};
        LinearDotRows<4>(xs, wr, in, ys);
      }
      for (; t < t1; ++t) {
        const float* xs[1] = {x + t * in};
        float* ys[1] = {y + t * out + o};
        LinearDotRows<1>(xs, wr, in, ys);
      }
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
