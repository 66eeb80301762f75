// Walsh-Hadamard transform (Sylvester ordering), CPU reference.
//
// y = scale * H_n x with H_1 = [1], H_2m = [[H_m, H_m], [H_m, -H_m]]: entry (i, j) of H_n is
// (-1)^popcount(i & j). With scale = n^-1/2 the transform is orthonormal; that is DeepSeek-V4's
// rotate_activation (fast_hadamard_transform.hadamard_transform(x, scale=d^-0.5)).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace nw::cpu {

/// True when n is a power of two (n >= 1).
bool IsPowerOfTwo(int64_t n);

/// In-place fast transform of x[0..n) (n a power of two), then multiplies by scale. The butterfly
/// order is fixed (stride 1, 2, 4, ...), so results are deterministic.
void HadamardTransform(float* x, int64_t n, float scale);

}  // namespace nw::cpu
