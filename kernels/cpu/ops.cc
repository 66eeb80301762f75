#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>

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

void LinearRows(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y) {
  // Blocks of rows small enough to stay in cache while every weight row passes over them.
  constexpr int64_t kBlock = 16;
  for (int64_t t0 = 0; t0 < rows; t0 += kBlock) {
    const int64_t t1 = std::min(rows, t0 + kBlock);
    for (int64_t o = 0; o < out; ++o) {
      const float* wr = w + o * in;
      for (int64_t t = t0; t < t1; ++t) y[t * out + o] = LinearDot(x + t * in, wr, in);
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
