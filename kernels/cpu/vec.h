// Small vector primitives shared by the CPU reference kernels. The summation order is fixed
// (eight interleaved partial sums combined pairwise), so results are identical run to run and
// for any caller that reaches the same vectors through a different memory layout.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace nw::cpu {

/// sum_i a[i] * b[i] in fp32 with a fixed association order.
inline float Dot(const float* a, const float* b, int64_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
    s4 += a[i + 4] * b[i + 4];
    s5 += a[i + 5] * b[i + 5];
    s6 += a[i + 6] * b[i + 6];
    s7 += a[i + 7] * b[i + 7];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
}

/// y[i] += alpha * x[i].
inline void Axpy(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace nw::cpu
