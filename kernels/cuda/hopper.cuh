// Hopper building blocks, device side: mbarriers, bulk tensor copies (TMA), wgmma on operands in
// shared memory with the 128-byte swizzle, and the fences between them. sm_90a only.
//
// Operand layout (SW128, K-major): a tile of R rows x 64 bf16 (128 bytes a row) starts at a
// 1024-byte aligned address; row r's 16-byte chunk c lies at r * 128 + ((c ^ (r % 8)) * 16).
// That is what Bf16RowsSw128Map's copies write and what SwizzledChunk computes for ordinary
// stores. A wider K is several such tiles; a k16 step s inside one is its address + 32 s bytes.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace nw::cuda::detail {

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// The first 1024-byte aligned shared-memory address at or after `p`, a shared-memory pointer
/// (SW128 tiles start there; allocate 1023 bytes more). Computed as an offset from `p`, so the
/// compiler still knows the result points to shared memory (a pointer rebuilt from an integer
/// turns every access through it into a generic load or store).
__device__ __forceinline__ unsigned char* Align1024(unsigned char* p) {
  return p + ((1024u - (SmemAddress(p) & 1023u)) & 1023u);
}

/// Byte offset of 16-byte chunk `c` (0..7) of row `r` in an SW128 tile.
__device__ __forceinline__ uint32_t SwizzledChunk(int r, int c) {
  return static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4));
}

// ---- mbarrier -------------------------------------------------------------------------------

__device__ __forceinline__ void MbarInit(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SmemAddress(bar)), "r"(count)
               : "memory");
}
/// Makes barrier initializations visible to the other threads and to the async proxy (the copy
/// engine); the block synchronizes after it.
__device__ __forceinline__ void MbarInitFence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void MbarArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(SmemAddress(bar)) : "memory");
}
/// Arrives and announces `bytes` that copies will complete on the barrier in this phase.
__device__ __forceinline__ void MbarArriveExpectTx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(SmemAddress(bar)),
               "r"(bytes)
               : "memory");
}
/// Waits until the phase with parity `parity` has completed.
__device__ __forceinline__ void MbarWait(uint64_t* bar, uint32_t parity) {
  const uint32_t a = SmemAddress(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        " .reg .pred p;\n"
        " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  } while (done == 0);
}

/// Whether the phase with parity `parity` has completed (no waiting).
__device__ __forceinline__ bool MbarTest(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  asm volatile(
      "{\n"
      " .reg .pred p;\n"
      " mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(SmemAddress(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

// ---- bulk tensor copy -----------------------------------------------------------------------

/// Copies the box at element column `x`, row `y` of `map` into shared memory at `dst` (1024-byte
/// aligned for SW128), completing its bytes on `bar`.
__device__ __forceinline__ void TmaLoad2d(void* dst, const CUtensorMap* map, int32_t x, int32_t y,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3}], [%4];\n" ::"r"(SmemAddress(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(SmemAddress(bar))
      : "memory");
}

/// Starts loading `bytes` (a multiple of 16) at `src` (16-byte aligned) into L2; no completion.
__device__ __forceinline__ void PrefetchL2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}

/// Has `bar` count one arrival of this thread when all of its earlier cp.async copies have landed
/// (the barrier's expected count includes it: `.noinc`).
__device__ __forceinline__ void CpAsyncMbarArriveNoinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(SmemAddress(bar))
               : "memory");
}
/// Waits for all of this thread's cp.async copies, committed or not.
__device__ __forceinline__ void CpAsyncWaitAll() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// ---- register reallocation between warpgroups --------------------------------------------------

/// The warpgroup's threads give registers back down to `kRegs` a thread (a multiple of 8).
template <int kRegs>
__device__ __forceinline__ void WarpgroupRegsDown() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
/// The warpgroup's threads take registers up to `kRegs` a thread (a multiple of 8).
template <int kRegs>
__device__ __forceinline__ void WarpgroupRegsUp() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

/// Starts loading the L2 line holding `p` (any alignment); no completion.
__device__ __forceinline__ void PrefetchL2Line(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// ---- fences and named barriers --------------------------------------------------------------

/// Orders this thread's ordinary shared-memory stores before later async-proxy reads (wgmma,
/// copies) of them; a barrier follows.
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void NamedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void NamedBarrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- wgmma ----------------------------------------------------------------------------------

/// Shared-memory matrix descriptor of an SW128 operand at `p` with 128-byte swizzle: the leading
/// byte offset `lbo` (MN-major: from one 64-element atom to the next along M or N; unused for
/// K-major) and the stride byte offset `sbo` (from one 8-row group to the next).
__device__ __forceinline__ uint64_t Sw128Desc(const void* p, uint32_t lbo, uint32_t sbo) {
  const uint64_t addr = SmemAddress(p);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t{(lbo >> 4) & 0x3FFF} << 16) |
         (uint64_t{(sbo >> 4) & 0x3FFF} << 32) | (uint64_t{1} << 62);
}
/// K-major SW128 operand at `p`: 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t Sw128Desc(const void* p) { return Sw128Desc(p, 16, 1024); }
/// The descriptor of the operand `bytes` (a multiple of 16) past `desc`'s: the start address is
/// the low 14 bits in 16-byte units, and shared-memory addresses stay below 2^18, so a plain add.
__device__ __forceinline__ uint64_t DescPlus(uint64_t desc, uint32_t bytes) {
  return desc + (bytes >> 4);
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
/// Keeps the compiler from moving accesses of accumulator registers across wgmma issue / wait.
template <int kN>
__device__ __forceinline__ void WgmmaFenceOperands(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int kN>
__device__ __forceinline__ void WgmmaFenceOperands(uint32_t (&a)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

// The 128 accumulator registers of an m64n256 wgmma, as asm text and as asm operands of d.
#define NW_WGMMA_D128_TEXT                                                                      \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"                       \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"             \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"             \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,"             \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"             \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,"             \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111," \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define NW_WGMMA_D128_OPERANDS                                                                    \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),  \
      "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),  \
      "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),  \
      "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),  \
      "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),  \
      "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]),  \
      "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),          \
      "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]),         \
      "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),         \
      "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]),         \
      "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

/// d[64 x 256] (+)= A[64 x 16] * B[256 x 16]^T, bf16 operands in shared memory (K-major
/// descriptors), fp32 accumulators; `accumulate` 0 overwrites d. Thread t of the warpgroup holds,
/// for n8 block j, d[4 j + {0, 1}] at row 16 (t / 32) + (t % 32) / 4, columns 8 j + 2 (t % 4) +
/// {0, 1}, and d[4 j + {2, 3}] eight rows lower.
/// kTransB 1: B[16 x 256] in shared memory MN-major instead (as WgmmaM64N256K16Bf16RegA's), for
/// d += A B with A K-major.
template <int kTransB = 0>
__device__ __forceinline__ void WgmmaM64N256K16Bf16(float (&d)[128], uint64_t a, uint64_t b,
                                                    int accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{" NW_WGMMA_D128_TEXT
      "},"
      " %128, %129, p, 1, 1, 0, %131;\n"
      "}\n"
      : NW_WGMMA_D128_OPERANDS
      : "l"(a), "l"(b), "r"(accumulate), "n"(kTransB));
}

/// d[64 x 32] (+)= A[64 x 16] * B[32 x 16]^T, bf16 operands in shared memory (K-major
/// descriptors), fp32 accumulators; `accumulate` 0 overwrites d. Thread t of the warpgroup holds,
/// for n8 block j, d[4 j + {0, 1}] at row 16 (t / 32) + (t % 32) / 4, columns 8 j + 2 (t % 4) +
/// {0, 1}, and d[4 j + {2, 3}] eight rows lower.
__device__ __forceinline__ void WgmmaM64N32K16Bf16(float (&d)[16], uint64_t a, uint64_t b,
                                                   int accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15},"
      " %16, %17, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b), "r"(accumulate));
}

/// d[64 x 64] (+)= A[64 x 16] * B[64 x 16]^T, bf16 operands in shared memory (K-major
/// descriptors), fp32 accumulators laid out as WgmmaM64N32K16Bf16's; `accumulate` 0 overwrites d.
__device__ __forceinline__ void WgmmaM64N64K16Bf16(float (&d)[32], uint64_t a, uint64_t b,
                                                   int accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},"
      " %32, %33, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(accumulate));
}

/// d[64 x 256] += A[64 x 16] * B[16 x 256]: A bf16 from registers (the mma.sync m16n8k16 A
/// fragment of the warp's 16 rows: a[0] = row g, columns 2 t4 + {0, 1}; a[1] = row g + 8; a[2],
/// a[3] the same at columns + 8), B bf16 in shared memory MN-major (N contiguous: descriptor with
/// the atom stride along N as `lbo`), fp32 accumulators laid out as WgmmaM64N256K16Bf16's.
__device__ __forceinline__ void WgmmaM64N256K16Bf16RegA(float (&d)[128], const uint32_t (&a)[4],
                                                        uint64_t b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{" NW_WGMMA_D128_TEXT
      "},"
      " {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n"
      "}\n"
      : NW_WGMMA_D128_OPERANDS
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

/// d[64 x kN] (+)= A[64 x 16] * B[kN x 16]^T for kN = 16, 32 or 64: A from registers (laid out
/// as WgmmaM64N256K16Bf16RegA's), B in shared memory K-major (as WgmmaM64N32K16Bf16's), both bf16
/// or (kF16) both f16; fp32 accumulators laid out as WgmmaM64N32K16Bf16's; `accumulate` 0
/// overwrites d.
template <int kN, bool kF16 = false>
__device__ __forceinline__ void WgmmaM64NK16RegA(float (&d)[kN / 2], const uint32_t (&a)[4],
                                                 uint64_t b, int accumulate) {
  static_assert(kN == 16 || kN == 32 || kN == 64);
#define NW_D8 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define NW_D16                                                                                    \
  NW_D8, "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), \
      "+f"(d[15])
#define NW_D32                                                                                   \
  NW_D16, "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),          \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define NW_IN "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate)
  if constexpr (kN == 16) {
    if constexpr (kF16) {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7},"
          " {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
          : NW_D8
          : NW_IN);
    } else {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7},"
          " {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
          : NW_D8
          : NW_IN);
    }
  } else if constexpr (kN == 32) {
    if constexpr (kF16) {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15},"
          " {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
          : NW_D16
          : NW_IN);
    } else {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15},"
          " {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
          : NW_D16
          : NW_IN);
    }
  } else {
    if constexpr (kF16) {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
          " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},"
          " {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
          : NW_D32
          : NW_IN);
    } else {
      asm volatile(
          "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
          "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
          " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},"
          " {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
          : NW_D32
          : NW_IN);
    }
  }
#undef NW_D8
#undef NW_D16
#undef NW_D32
#undef NW_IN
}

}  // namespace nw::cuda::detail

#undef NW_WGMMA_D128_TEXT
#undef NW_WGMMA_D128_OPERANDS
