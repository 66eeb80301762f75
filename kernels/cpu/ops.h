// Plain-loop CPU reference ops over raw pointers. These are the oracle: written for clarity and
// exactness first, with loop orders the compiler can vectorize. fp32 unless stated.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace nw::cpu {

/// y[t, o] = sum_i x[t, i] * w[o, i]   (w row-major [out, in], like torch Linear).
void Linear(const float* x, int64_t tokens, int64_t in, const float* w, int64_t out, float* y);
/// Linear with the loops swapped (weight-stationary): each weight row is read once per block of
/// 16 input rows, and four rows share each weight load, so a batch of up to 16 decode tokens
/// streams the weights once. Every y[t, o] is computed with Linear's operations in Linear's order
/// (its four partial sums as the lanes of an SSE register where SSE2 is available), so the two are
/// bit-identical row by row (tests/kernels/ops_rows_test.cc).
void LinearRows(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y);
/// y = x / sqrt(mean(x^2) + eps) * w  over n values (w may be null: weightless RMS norm).
void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* y);

}  // namespace nw::cpu
