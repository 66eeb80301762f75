// What the tensor-core linear kernels share (linear_mma.cu, linear_mma_resident.cu): the split of
// fp32 x values into bf16 pieces as A fragments are loaded.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

namespace nw::cuda::detail {

// x -> up to three bf16 pieces: hi = bf16(x), mid = bf16(x - hi), lo = bf16(x - hi - mid); each
// difference is exact in fp32 and the pieces sum to x exactly (24 significand bits in three 8-bit
// pieces). One piece is bf16(x), round to nearest even.
// The pieces of two consecutive x values as kParts packed bf16 pairs (first in the low half).
template <int kParts>
__device__ __forceinline__ void PackPieces(float2 v, uint32_t (&out)[kParts]) {
#pragma unroll
  for (int i = 0; i < kParts; ++i) {
    const __nv_bfloat162 b = __floats2bfloat162_rn(v.x, v.y);
    memcpy(&out[i], &b, sizeof(out[i]));
    if (i + 1 < kParts) {
      const float2 f = __bfloat1622float2(b);
      v.x -= f.x;
      v.y -= f.y;
    }
  }
}

}  // namespace nw::cuda::detail
