// Warp-level tensor-core helpers (mma.sync, sm_80+ instructions that Hopper runs natively).
// Fragment layouts of m16n8k16 (PTX ISA "Matrix Fragments for mma.m16n8k16"), with g = lane / 4
// and t = lane % 4: A (16x16, row-major) a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..],
// a3 = A[g+8][2t+8..]; B (16x8, column-major) b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g];
// C (16x8 fp32) c0,c1 = C[g][2t, 2t+1], c2,c3 = C[g+8][2t, 2t+1]. Each 32-bit register holds two
// bf16 values, the lower column (or row, for B) in the low half.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace nw::cuda::detail {

/// c += a * b for one m16n8k16 tile, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void MmaBf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Two e4m3 codes (low byte first) widened exactly to two bf16 values (low half first).
__device__ __forceinline__ uint32_t E4m3x2ToBf16x2(uint16_t two) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  const float2 f = __half22float2(__half2(h));
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
  uint32_t u;
  memcpy(&u, &b, sizeof(u));
  return u;
}

/// Two floats rounded to bf16 (RNE) and packed, the first in the low half.
__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
  const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &b, sizeof(u));
  return u;
}

}  // namespace nw::cuda::detail

namespace nw::cuda::detail {

/// ldmatrix .x4: lanes 8j..8j+7 give the row addresses (16 bytes each) of 8x8 matrix j; r[j]
/// receives row lane / 4, elements 2 (lane % 4) and + 1 of matrix j (the mma B-fragment layout of
/// a matrix stored [n][k]).
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* row_address) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

/// ldmatrix .x4 .trans: lanes 8j..8j+7 give the row addresses (16 bytes each) of 8x8 matrix j;
/// r[j] receives matrix j transposed into the mma B-fragment layout (elements [2t, 2t+1][g]).
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* row_address) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

}  // namespace nw::cuda::detail

namespace nw::cuda::detail {

/// cp.async of 16 bytes global -> shared (bypassing L1), zero-filled when `valid` is false (no
/// global read then; `src` must still be a mapped address). Completes at CpAsyncWait.
__device__ __forceinline__ void CpAsync16(void* dst_shared, const void* src, bool valid) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst_shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
/// CpAsync16 that also has L2 fetch the rest of the source's 256-byte block (`.L2::256B`): the
/// neighbouring pieces of a gathered row then hit L2.
__device__ __forceinline__ void CpAsync16L2Prefetch256(void* dst_shared, const void* src,
                                                       bool valid) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst_shared));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
/// CpAsync16 to a shared-memory address (`dst`, as SmemAddress gives it).
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
/// cp.async of 8 bytes global -> shared (through L1; `src` 8-byte aligned), zero-filled when
/// `valid` is false (`src` must still be mapped). Completes at CpAsyncWait.
__device__ __forceinline__ void CpAsync8(void* dst_shared, const void* src, bool valid) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst_shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(d), "l"(src),
               "r"(valid ? 8 : 0)
               : "memory");
}
/// cp.async of 4 bytes global -> shared (through L1; `src` 4-byte aligned). Completes at
/// CpAsyncWait.
__device__ __forceinline__ void CpAsync4(void* dst_shared, const void* src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst_shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src) : "memory");
}
/// Closes this thread's cp.async group.
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace nw::cuda::detail
