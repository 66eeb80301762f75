#include "kernels/cpu/ops.h"

#include <cmath>

namespace nw::cpu {

void Linear(const float* x, int64_t tokens, int64_t in, const float* w, int64_t out, float* y) {
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xr = x + t * in;
    for (int64_t o = 0; o < out; ++o) {
      const float* wr = w + o * in;
      // Four partial sums keep the dependency chain short; the order is fixed, so results are
      // deterministic run to run.
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t i = 0;
      for (; i + 4 <= in; i += 4) {
        s0 += xr[i] * wr[i];
        s1 += xr[i + 1] * wr[i + 1];
        s2 += xr[i + 2] * wr[i + 2];
        s3 += xr[i + 3] * wr[i + 3];
      }
      for (; i < in; ++i) s0 += xr[i] * wr[i];
      y[t * out + o] = (s0 + s1) + (s2 + s3);
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
