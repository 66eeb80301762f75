// Sparse attention on Hopper's wgmma (see attention.h): head_dim 512, bf16 q and KV, one query per
// block of two warpgroups. The query's 64 (zero-padded) heads are the M = 64 rows of every
// wgmma. Per 64-entry tile of gathered KV rows (cp.async into one of two shared-memory stages,
// 128-byte swizzled; the next tile's rows arrive while this one is computed):
//   S = Q K^T: warpgroup c multiplies Q (shared memory) with the tile's entries 32 c .. 32 c + 31
//     (wgmma m64n32k16, 32 k steps over the 512 dims);
//   online softmax in base 2 with the sink as the initial maximum; the two warpgroups exchange
//     their row maxima through shared memory, so both rescale by the same factors;
//   O += P V: warpgroup c owns output dims 256 c .. 256 c + 255 (128 fp32 accumulators a
//     thread); P (rounded to bf16) is the A operand from registers, its own half from the S
//     registers and the other warpgroup's half through shared memory; V is the same tile read
//     N-major (wgmma m64n256k16, B transposed).
// The row sums of the two halves are added at the end; the sink's term is in warpgroup 0's.
// Deterministic run to run; within the tensor-core path's bound of the CPU's.
#include "kernels/cuda/attention_impl.cuh"
#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/tensor_map.h"

namespace nw::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kDim = 512;
constexpr int kEntries = 64;  // entries a tile
constexpr int kHeads = 64;
constexpr int kSub = kDim / 64;         // 128-byte atoms along the dims
constexpr int kAtom = 64 * 128;         // bytes of one atom of 64 rows
constexpr int kPStride = kEntries + 8;  // bf16 a row of the P exchange
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kPrefetch = 3;  // tiles ahead whose rows are prefetched into L2

struct WgAttnSmem {
  static constexpr size_t kQ = 0;                               // [kSub][64 heads x 128 B]
  static constexpr size_t kKv = kQ + size_t{kSub} * kAtom;      // [2][kSub][64 entries x 128 B]
  static constexpr size_t kP = kKv + 2 * size_t{kSub} * kAtom;  // bf16 [64][kPStride]
  static constexpr size_t kMax = kP + size_t{kHeads} * kPStride * 2;     // float [2][64]
  static constexpr size_t kSum = kMax + 2 * kHeads * sizeof(float);      // float [2][64]
  static constexpr size_t kRow = kSum + 2 * kHeads * sizeof(float);      // int64 [3][64]
  static constexpr size_t kSet = kRow + 3 * kEntries * sizeof(int64_t);  // int [3][64]
  static constexpr size_t kBar = kSet + 3 * kEntries * sizeof(int);      // uint64 q, full[2]
  static constexpr size_t kBytes = kBar + 3 * sizeof(uint64_t);
  static constexpr size_t kAlloc = kBytes + 1024;  // room to align the base to 1024
};

// L2 prefetch of a query's gathered rows kPrefetch tiles ahead, by threads 64 .. 127 (one entry
// each): the row of tile u + 1 is looked up while tile u's prefetch is issued, so no thread waits
// on the lookup. The constructor issues tiles 1 .. kPrefetch - 1 and looks up tile kPrefetch.
struct RowPrefetch {
  const SparseAttentionParams& p;
  int64_t i, len0, total, tiles;
  const unsigned char* src = nullptr;

  __device__ __forceinline__ RowPrefetch(const SparseAttentionParams& params, int64_t query,
                                         int64_t set0_len, int64_t entries, int64_t n_tiles)
      : p(params), i(query), len0(set0_len), total(entries), tiles(n_tiles) {
    for (int64_t u = 1; u < kPrefetch; ++u) {
      Index(u);
      Issue();
    }
    Index(kPrefetch);
  }
  __device__ __forceinline__ void Index(int64_t u) {
    src = nullptr;
    const int64_t s = u * kEntries + (threadIdx.x - kEntries);
    if (threadIdx.x >= kEntries && threadIdx.x < 2 * kEntries && u < tiles && s < total) {
      const Slot slot = SlotAt(p, i, len0, s);
      if (slot.row >= 0) {
        src = static_cast<const unsigned char*>(p.sets[slot.set].kv) + slot.row * (kDim * 2);
      }
    }
  }
  __device__ __forceinline__ void Issue() const {
    if (src != nullptr) PrefetchL2(src, kDim * 2);
  }
};

// kTma: Q and the KV rows arrive by bulk tensor copies (one 128-byte box a row and atom, rows
// past the buffer zero-filled), completing on mbarriers; else (the default) by cp.async from
// every thread. The H200 ran the copies slower (1.91 against 1.01 ms at m = 2,048: 512 copies a
// tile issued by two warps keep the others waiting at the next barrier).
template <bool kTma>
__global__ void __launch_bounds__(kThreads, 1)
    SparseAttentionWgmmaKernel(const __grid_constant__ CUtensorMap qmap,
                               const __grid_constant__ CUtensorMap kvmap0,
                               const __grid_constant__ CUtensorMap kvmap1,
                               SparseAttentionParams p) {
  using L = WgAttnSmem;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = Align1024(smem_raw);
  unsigned char* sq = smem + L::kQ;
  unsigned char* skv = smem + L::kKv;
  uint16_t* sp = reinterpret_cast<uint16_t*>(smem + L::kP);
  float(*smax)[kHeads] = reinterpret_cast<float(*)[kHeads]>(smem + L::kMax);
  float(*ssum)[kHeads] = reinterpret_cast<float(*)[kHeads]>(smem + L::kSum);
  int64_t(*s_row)[kEntries] = reinterpret_cast<int64_t(*)[kEntries]>(smem + L::kRow);
  int(*s_set)[kEntries] = reinterpret_cast<int(*)[kEntries]>(smem + L::kSet);
  uint64_t* qbar = reinterpret_cast<uint64_t*>(smem + L::kBar);
  uint64_t* full = qbar + 1;  // [2]: tile u's rows in stage u % 2, 64 arrivals a phase

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int c = warp >> 2, wq = warp & 3;
  const int64_t i = blockIdx.x;

  if constexpr (kTma) {
    if (threadIdx.x == 0) {
      MbarInit(qbar, 1);
      MbarInit(&full[0], kEntries);
      MbarInit(&full[1], kEntries);
      MbarInitFence();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      // Q: 8 boxes of 64 rows (heads; rows past n_heads are the next query's, never stored, or
      // zeros past the last) x 64 dims.
      MbarArriveExpectTx(qbar, kSub * kAtom);
      for (int kb = 0; kb < kSub; ++kb) {
        TmaLoad2d(sq + kb * kAtom, &qmap, kb * 64, static_cast<int32_t>(i * p.n_heads), qbar);
      }
    }
  } else {
    // Q by cp.async with tile 0's rows (zero rows past n_heads).
    const uint16_t* q = static_cast<const uint16_t*>(p.q) + i * p.n_heads * kDim;
    constexpr int kChunks = kDim / 8;
#pragma unroll 4
    for (int idx = threadIdx.x; idx < kHeads * kChunks; idx += kThreads) {
      const int h = idx / kChunks, ch = idx % kChunks;
      const bool live = h < p.n_heads;
      CpAsync16(sq + (ch / 8) * kAtom + SwizzledChunk(h, ch % 8),
                q + (live ? h : 0) * kDim + ch * 8, live);
    }
  }
  const int64_t len0 = SetLength(p.sets[0], i);
  const int64_t total = len0 + SetLength(p.sets[1], i);
  const int64_t tiles = (total + kEntries - 1) / kEntries;
  auto lookup = [&](int64_t u) {
    if (threadIdx.x < kEntries && u < tiles) {
      const int64_t s = u * kEntries + threadIdx.x;
      Slot slot{0, -1};
      if (s < total) slot = SlotAt(p, i, len0, s);
      s_set[u % 3][threadIdx.x] = slot.set;
      s_row[u % 3][threadIdx.x] = slot.row;
    }
  };
  // Tile u's rows into stage u % 2 by cp.async (zeros for skipped entries); always closes a group.
  // Thread x copies 16-byte chunk x % 64 of rows x / 64 + 4 k, k = 0 .. 15.
  const int ch = threadIdx.x % 64, r_lo = threadIdx.x / 64;
  const uint32_t ch_off = static_cast<uint32_t>((ch / 8) * kAtom);
  const uint32_t sw_even = static_cast<uint32_t>(((ch & 7) ^ r_lo) << 4);
  const uint32_t sw_odd = static_cast<uint32_t>(((ch & 7) ^ (r_lo + 4)) << 4);
  const unsigned char* kv0 = static_cast<const unsigned char*>(p.sets[0].kv) + ch * 16;
  const unsigned char* kv1 = static_cast<const unsigned char*>(p.sets[1].kv) + ch * 16;
  static_assert(kThreads == 4 * kEntries && kDim / 8 == 64);
  auto issue = [&](int64_t u) {
    if constexpr (kTma) {
      // Thread r < 64 copies row r of tile u (its own lookup): 8 boxes of 128 bytes; a skipped
      // entry reads past the buffer's last row (zeros).
      if (threadIdx.x < kEntries && u < tiles) {
        const int r = threadIdx.x;
        const int set = s_set[u % 3][r];
        const int64_t row = s_row[u % 3][r];
        const CUtensorMap* map = set != 0 ? &kvmap1 : &kvmap0;
        const int32_t y = static_cast<int32_t>(row >= 0 ? row : p.sets[set].rows);
        unsigned char* dst = skv + (u & 1) * kSub * kAtom + r * 128;
        MbarArriveExpectTx(&full[u & 1], kSub * 128);
#pragma unroll
        for (int kb = 0; kb < kSub; ++kb)
          TmaLoad2d(dst + kb * kAtom, map, kb * 64, y, &full[u & 1]);
      }
      return;
    }
    if (u < tiles) {
      unsigned char* dst = skv + (u & 1) * kSub * kAtom + ch_off;
      const int64_t* rows = s_row[u % 3];
      const int* sets = s_set[u % 3];
#pragma unroll
      for (int k = 0; k < kEntries / 4; ++k) {
        const int r = r_lo + 4 * k;
        unsigned char* d = dst + r * 128 + ((k & 1) ? sw_odd : sw_even);
        const int64_t row = rows[r];
        if (row >= 0) {
          CpAsync16(d, (sets[r] != 0 ? kv1 : kv0) + row * (kDim * 2), true);
        } else {
          *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
        }
      }
    }
    CpAsyncCommit();
  };
  RowPrefetch pf{p, i, len0, total, tiles};
  lookup(0);
  lookup(1);
  __syncthreads();
  issue(0);

  // This thread's head rows r0 = 16 wq + g and r1 = r0 + 8 of the warpgroup's M = 64.
  const int r0 = wq * 16 + g, r1 = r0 + 8;
  float m0 = r0 < p.n_heads ? p.sink[r0] * kLog2e : 0.0f;
  float m1 = r1 < p.n_heads ? p.sink[r1] * kLog2e : 0.0f;
  // The sink's e^0 term (after the max shift) counts once, in warpgroup 0.
  float l0 = (c == 0 && m0 != -INFINITY) ? 1.0f : 0.0f;
  float l1 = (c == 0 && m1 != -INFINITY) ? 1.0f : 0.0f;
  const float scale2 = p.scale * kLog2e;
  const uint64_t dq = Sw128Desc(sq);
  float o[128];
#pragma unroll
  for (int e = 0; e < 128; ++e) o[e] = 0.0f;

  for (int64_t t = 0; t < tiles; ++t) {
    const unsigned char* kv = skv + (t & 1) * kSub * kAtom;
    if constexpr (kTma) {
      if (t == 0) MbarWait(qbar, 0);
      MbarWait(&full[t & 1], static_cast<uint32_t>((t >> 1) & 1));
    } else {
      CpAsyncWait<0>();
      FenceProxyAsync();  // this thread's copies and stores of tile t (and Q), for wgmma
    }
    __syncthreads();  // tile t is complete; tile t - 1 (stage, P, maxima) is no longer read

    // S = Q K^T over this warpgroup's 32 entries, as two independent chains of MMAs (even and
    // odd k steps) that are added afterwards: the tensor cores need not wait for one small MMA's
    // result before starting the next.
    float s[16], s_odd[16];
#pragma unroll
    for (int e = 0; e < 16; ++e) s[e] = s_odd[e] = 0.0f;
    WgmmaFenceOperands(s);
    WgmmaFenceOperands(s_odd);
    WgmmaFence();
    const uint64_t dk = Sw128Desc(kv + 32 * c * 128);
#pragma unroll
    for (int k = 0; k < kDim / 16; k += 2) {
      const uint32_t off = (k / 4) * kAtom + (k % 4) * 32;
      WgmmaM64N32K16Bf16(s, DescPlus(dq, off), DescPlus(dk, off), k > 0);
      WgmmaM64N32K16Bf16(s_odd, DescPlus(dq, off + 32), DescPlus(dk, off + 32), k > 0);
    }
    WgmmaCommit();
    // While the tensor cores work: the next tile's copies, the slots of the one after, and the
    // L2 prefetch of tile t + kPrefetch's rows (indices loaded one tile ago).
    issue(t + 1);
    lookup(t + 2);
    pf.Issue();
    pf.Index(t + kPrefetch + 1);
    WgmmaWait<0>();
    WgmmaFenceOperands(s);
    WgmmaFenceOperands(s_odd);
#pragma unroll
    for (int e = 0; e < 16; ++e) s[e] += s_odd[e];

    // Scale and mask; row maxima over this warpgroup's entries, then over both.
    const int64_t* rows = s_row[t % 3] + 32 * c;
    float mx0, mx1;
    ScaleMaskRowMax<4>(
        s, scale2, t4, [&](int e) { return rows[e] >= 0; }, mx0, mx1);
    if (t4 == 0) {
      smax[c][r0] = mx0;
      smax[c][r1] = mx1;
    }
    __syncthreads();
    mx0 = fmaxf(smax[0][r0], smax[1][r0]);
    mx1 = fmaxf(smax[0][r1], smax[1][r1]);
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    SoftmaxStep(reinterpret_cast<float(&)[4][4]>(s), reinterpret_cast<float(&)[32][4]>(o), mn0, mn1,
                m0, m1, l0, l1);
    // P in bf16: this warpgroup's two k16 steps of entries as A fragments, and into shared
    // memory for the other warpgroup.
    uint32_t pa[2][4];
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      pa[kk][0] = PackBf16x2(s[8 * kk], s[8 * kk + 1]);
      pa[kk][1] = PackBf16x2(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = PackBf16x2(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = PackBf16x2(s[8 * kk + 6], s[8 * kk + 7]);
      const int e = 32 * c + 16 * kk + 2 * t4;
      *reinterpret_cast<uint32_t*>(sp + r0 * kPStride + e) = pa[kk][0];
      *reinterpret_cast<uint32_t*>(sp + r1 * kPStride + e) = pa[kk][1];
      *reinterpret_cast<uint32_t*>(sp + r0 * kPStride + e + 8) = pa[kk][2];
      *reinterpret_cast<uint32_t*>(sp + r1 * kPStride + e + 8) = pa[kk][3];
    }
    __syncthreads();
    uint32_t pb[2][4];  // the other warpgroup's entries
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const int e = 32 * (1 - c) + 16 * kk + 2 * t4;
      pb[kk][0] = *reinterpret_cast<const uint32_t*>(sp + r0 * kPStride + e);
      pb[kk][1] = *reinterpret_cast<const uint32_t*>(sp + r1 * kPStride + e);
      pb[kk][2] = *reinterpret_cast<const uint32_t*>(sp + r0 * kPStride + e + 8);
      pb[kk][3] = *reinterpret_cast<const uint32_t*>(sp + r1 * kPStride + e + 8);
    }

    // O += P V over the tile's four k16 steps of entries (in ascending order). The A fragments
    // are settled before the fence, so no wgmma waits for register writes between them.
    uint32_t a[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const bool own = (kk >> 1) == c;
#pragma unroll
      for (int x = 0; x < 4; ++x) a[kk][x] = own ? pa[kk & 1][x] : pb[kk & 1][x];
      WgmmaFenceOperands(a[kk]);
    }
    const uint64_t dv = Sw128Desc(kv + 4 * c * kAtom, kAtom, 1024);
    WgmmaFenceOperands(o);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) WgmmaM64N256K16Bf16RegA(o, a[kk], DescPlus(dv, kk * 16 * 128));
    WgmmaCommit();
    WgmmaWait<0>();
    WgmmaFenceOperands(o);
  }
  if constexpr (kTma) {
    if (tiles == 0) MbarWait(qbar, 0);  // no copy outlives the block
  } else {
    CpAsyncWait<0>();  // no copy outlives the block (the trailing groups are empty)
  }

  // Row sums of both halves, then the outputs of this warpgroup's dims.
  if (t4 == 0) {
    ssum[c][r0] = l0;
    ssum[c][r1] = l1;
  }
  __syncthreads();
  StoreOutputHalf512(p, i, c, r0, t4, o, 1.0f / (ssum[0][r0] + ssum[1][r0]),
                     1.0f / (ssum[0][r1] + ssum[1][r1]));
}

// ---- The dims-split kernel (the default) ----------------------------------------------------
//
// Warpgroup c owns dims 256 c .. 256 c + 255 of Q, of every KV row and of O, and copies only its
// half of each row (cp.async, its own two stages), so the warpgroups share no copy buffers.
// Per 64-entry tile t:
//   S_c = Q_c K_c^T over the warpgroup's 256 dims (16 wgmma m64n64k16); the two partial S are
//     exchanged through shared memory and added in a fixed order (partial 0 + partial 1), so both
//     warpgroups hold the same S bits and run the same online softmax over all 64 entries (no
//     row-maximum or P exchange);
//   O_c += P V_c (4 wgmma m64n256k16, P from registers), left in flight: the next tile's S is
//     issued behind it, and then the warpgroup waits for both (so the stage P V read can take
//     tile t + 2's rows, issued right then).
// The tensor cores run P V (t) and S (t + 1) back to back; the exchange and the softmax are the
// only phases without MMAs in flight.
constexpr int kHalf = kDim / 2;                 // dims a warpgroup owns
constexpr int kHalfAtoms = kHalf / 64;          // 4 atoms of 64 dims
constexpr int kHalfBytes = kHalfAtoms * kAtom;  // 32 KiB: a half of 64 rows
constexpr int kRing = 4;                        // tiles of looked-up rows in flight

struct SplitSmem {
  static constexpr size_t kQ = 0;                             // [2 halves][4 atoms][64 x 128 B]
  static constexpr size_t kKv = kQ + 2 * size_t{kHalfBytes};  // [2 stages][2 halves][...]
  static constexpr size_t kX = kKv + 4 * size_t{kHalfBytes};  // float [2][64][64], swizzled
  // Row pointers [4][64] (null: a skipped entry).
  static constexpr size_t kRow = kX + 2 * size_t{kHeads} * kEntries * sizeof(float);
  static constexpr size_t kBytes = kRow + size_t{kRing} * kEntries * sizeof(void*);
  static constexpr size_t kAlloc = kBytes + 1024;  // room to align the base to 1024
};
static_assert(SplitSmem::kAlloc <= 227 * 1024, "the H200's shared memory a block");

__global__ void __launch_bounds__(kThreads, 1) SparseAttentionSplitKernel(SparseAttentionParams p) {
  using L = SplitSmem;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = Align1024(smem_raw);
  const int c = threadIdx.x >> 7, tid = threadIdx.x & 127;
  const int warp = tid >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  unsigned char* sq = smem + L::kQ + c * kHalfBytes;  // this warpgroup's half of Q
  auto skv = [&](int64_t u) { return smem + L::kKv + ((u & 1) * 2 + c) * kHalfBytes; };
  float* sx = reinterpret_cast<float*>(smem + L::kX);  // [2][64][64]
  using RowPtr = const unsigned char*;
  RowPtr(*ring)[kEntries] = reinterpret_cast<RowPtr(*)[kEntries]>(smem + L::kRow);
  const int64_t i = blockIdx.x;

  const int64_t len0 = SetLength(p.sets[0], i);
  const int64_t total = len0 + SetLength(p.sets[1], i);
  const int64_t tiles = (total + kEntries - 1) / kEntries;
  // Row pointers of tile u into ring[u % kRing] (threads 0 .. 63): the copies then need one
  // add an entry.
  auto lookup = [&](int64_t u) {
    if (threadIdx.x < kEntries && u < tiles) {
      const int64_t s = u * kEntries + threadIdx.x;
      RowPtr v = nullptr;
      if (s < total) {
        const Slot slot = SlotAt(p, i, len0, s);
        if (slot.row >= 0) {
          v = static_cast<const unsigned char*>(p.sets[slot.set].kv) + slot.row * (kDim * 2);
        }
      }
      ring[u % kRing][threadIdx.x] = v;
    }
  };
  // This warpgroup's half of tile u's rows into its stage u % 2 (zeros for skipped entries); the
  // thread copies 16-byte chunk ch = tid % 32 of rows tid / 32 + 4 k, k = 0 .. 15. Closes a group.
  const int ch = tid & 31, r_lo = tid >> 5;
  const uint32_t ch_off = static_cast<uint32_t>((ch / 8) * kAtom);
  const uint32_t sw_even = static_cast<uint32_t>(((ch & 7) ^ r_lo) << 4);
  const uint32_t sw_odd = static_cast<uint32_t>(((ch & 7) ^ (r_lo + 4)) << 4);
  const int src_off = c * 512 + ch * 16;
  const unsigned char* mapped = static_cast<const unsigned char*>(p.q);  // read by no zero fill
  auto issue = [&](int64_t u) {
    if (u < tiles) {
      unsigned char* dst = skv(u) + ch_off;
      const RowPtr* rows = ring[u % kRing];
#pragma unroll
      for (int k = 0; k < kEntries / 4; ++k) {
        const int r = r_lo + 4 * k;
        const RowPtr v = rows[r];
        CpAsync16(dst + r * 128 + ((k & 1) ? sw_odd : sw_even), v != nullptr ? v + src_off : mapped,
                  v != nullptr);
      }
    }
    CpAsyncCommit();
  };
  RowPrefetch pf{p, i, len0, total, tiles};

  lookup(0);
  lookup(1);
  lookup(2);
  __syncthreads();
  {  // This warpgroup's half of Q (zero rows past n_heads), in the same group as tile 0.
    const uint16_t* q = static_cast<const uint16_t*>(p.q) + i * p.n_heads * kDim + c * kHalf;
#pragma unroll 4
    for (int k = 0; k < kHeads / 4; ++k) {
      const int h = r_lo + 4 * k;
      const bool live = h < p.n_heads;
      CpAsync16(sq + ch_off + h * 128 + ((k & 1) ? sw_odd : sw_even),
                q + (live ? h : 0) * kDim + ch * 8, live);
    }
  }
  issue(0);

  const int r0 = warp * 16 + g, r1 = r0 + 8;  // this thread's head rows
  float m0 = r0 < p.n_heads ? p.sink[r0] * kLog2e : 0.0f;
  float m1 = r1 < p.n_heads ? p.sink[r1] * kLog2e : 0.0f;
  // The sink's e^0 term (after the max shift); both warpgroups hold the whole row sums.
  float l0 = m0 != -INFINITY ? 1.0f : 0.0f;
  float l1 = m1 != -INFINITY ? 1.0f : 0.0f;
  const float scale2 = p.scale * kLog2e;
  const uint64_t dq = Sw128Desc(sq);
  float* x_own = sx + c * kHeads * kEntries;
  const float* x_other = sx + (1 - c) * kHeads * kEntries;
  // Float2 slot of (row r, entries 8 j + 2 t4 + {0, 1}) in an exchange buffer: rows 256 bytes
  // apart, slots XORed by r % 4 so that a half-warp's eight-byte stores hit distinct banks.
  auto xslot = [&](int r, int j) { return r * kEntries + 2 * ((4 * j + t4) ^ ((r & 3) << 2)); };
  float o[128];
#pragma unroll
  for (int e = 0; e < 128; ++e) o[e] = 0.0f;
  uint32_t a[4][4] = {};  // P of the tile whose P V is in flight

  for (int64_t t = 0; t < tiles; ++t) {
    CpAsyncWait<0>();
    FenceProxyAsync();             // this thread's copies of tile t (and Q), for wgmma
    NamedBarrierSync(1 + c, 128);  // the warpgroup's half of tile t is complete
    const unsigned char* kv = skv(t);

    float s[32];
#pragma unroll
    for (int e = 0; e < 32; ++e) s[e] = 0.0f;
    WgmmaFenceOperands(s);
    WgmmaFence();
    const uint64_t dk = Sw128Desc(kv);
#pragma unroll
    for (int k = 0; k < kHalf / 16; ++k) {
      const uint32_t off = (k / 4) * kAtom + (k % 4) * 32;
      WgmmaM64N64K16Bf16(s, DescPlus(dq, off), DescPlus(dk, off), k > 0);
    }
    WgmmaCommit();
    pf.Issue();
    pf.Index(t + kPrefetch + 1);
    // P V (t - 1) and S (t) retire together: ptxas serializes every wgmma of a kernel (C7514)
    // when a wait for fewer than all groups has to retire a group issued in the previous loop
    // iteration. Tile t - 1's stage then takes tile t + 1, whose rows have the exchange, the
    // softmax and P V (t) to arrive.
    WgmmaWait<0>();
    WgmmaFenceOperands(o);
    WgmmaFenceOperands(s);
    issue(t + 1);

    // Exchange the partial S: the other warpgroup has read this one's buffer of tile t - 1.
    if (t > 0) NamedBarrierSync(3 + c, 2 * 128);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      *reinterpret_cast<float2*>(x_own + xslot(r0, j)) = make_float2(s[4 * j], s[4 * j + 1]);
      *reinterpret_cast<float2*>(x_own + xslot(r1, j)) = make_float2(s[4 * j + 2], s[4 * j + 3]);
    }
    __syncthreads();  // both partials stored; every read of ring slot (t - 1) % kRing is done
    lookup(t + 3);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float2 x0 = *reinterpret_cast<const float2*>(x_other + xslot(r0, j));
      const float2 x1 = *reinterpret_cast<const float2*>(x_other + xslot(r1, j));
      // partial 0 + partial 1 in both warpgroups: the same bits.
      s[4 * j] = c == 0 ? s[4 * j] + x0.x : x0.x + s[4 * j];
      s[4 * j + 1] = c == 0 ? s[4 * j + 1] + x0.y : x0.y + s[4 * j + 1];
      s[4 * j + 2] = c == 0 ? s[4 * j + 2] + x1.x : x1.x + s[4 * j + 2];
      s[4 * j + 3] = c == 0 ? s[4 * j + 3] + x1.y : x1.y + s[4 * j + 3];
    }
    NamedBarrierArrive(3 + (1 - c), 2 * 128);  // the other warpgroup's buffer is read

    // Scale and mask; row maxima over the 64 entries.
    const RowPtr* rows = ring[t % kRing];
    float mx0, mx1;
    ScaleMaskRowMax<8>(
        s, scale2, t4, [&](int e) { return rows[e] != nullptr; }, mx0, mx1);
    SoftmaxStep(reinterpret_cast<float(&)[8][4]>(s), reinterpret_cast<float(&)[32][4]>(o),
                fmaxf(m0, mx0), fmaxf(m1, mx1), m0, m1, l0, l1);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      a[kk][0] = PackBf16x2(s[8 * kk], s[8 * kk + 1]);
      a[kk][1] = PackBf16x2(s[8 * kk + 2], s[8 * kk + 3]);
      a[kk][2] = PackBf16x2(s[8 * kk + 4], s[8 * kk + 5]);
      a[kk][3] = PackBf16x2(s[8 * kk + 6], s[8 * kk + 7]);
      WgmmaFenceOperands(a[kk]);
    }

    // O_c += P V_c, left in flight.
    const uint64_t dv = Sw128Desc(kv, kAtom, 1024);
    WgmmaFenceOperands(o);
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) WgmmaM64N256K16Bf16RegA(o, a[kk], DescPlus(dv, kk * 16 * 128));
    WgmmaCommit();
  }
  WgmmaWait<0>();
  WgmmaFenceOperands(o);
  CpAsyncWait<0>();  // no copy outlives the block (the trailing groups are empty)
  if (tiles > 0) NamedBarrierSync(3 + c, 2 * 128);  // the last tile's arrival

  StoreOutputHalf512(p, i, c, r0, t4, o, 1.0f / l0, 1.0f / l1);
}

}  // namespace

bool WgmmaAttentionApplies(const SparseAttentionParams& p) {
  if (!p.q_bf16 || p.head_dim != kDim || p.n_heads > kHeads || p.kv_format != KvFormat::kBf16) {
    return false;
  }
  if (reinterpret_cast<uintptr_t>(p.q) % 16 != 0 || p.m * p.n_heads >= 0x7FFFFFFF) return false;
  for (const KvSet& s : p.sets) {
    if (s.indices != nullptr &&
        (reinterpret_cast<uintptr_t>(s.kv) % 16 != 0 || s.rows >= 0x7FFFFFFF)) {
      return false;
    }
  }
  return true;
}

Status LaunchSparseAttentionWgmma(const SparseAttentionParams& p, AttentionTcKernel which,
                                  cudaStream_t stream) {
  if (which == AttentionTcKernel::kAuto || which == AttentionTcKernel::kWgmmaDimsSplit) {
    NW_RETURN_IF_ERROR(
        AllowDynamicSharedMemory(reinterpret_cast<const void*>(SparseAttentionSplitKernel),
                                 SplitSmem::kAlloc, "SparseAttentionSplitKernel"));
    SparseAttentionSplitKernel<<<static_cast<unsigned>(p.m), kThreads, SplitSmem::kAlloc, stream>>>(
        p);
    return NW_CUDA_LAUNCH_STATUS("SparseAttentionSplitKernel");
  }
  const bool tma = which == AttentionTcKernel::kWgmmaTma;
  CUtensorMap maps[3] = {};
  if (tma) {
    Result<CUtensorMap> q = Bf16RowsSw128Map(p.q, static_cast<uint64_t>(p.m * p.n_heads), kDim, 64);
    if (!q.ok()) return q.status();
    maps[0] = *q;
    for (int s = 0; s < 2; ++s) {
      const KvSet& set = p.sets[s];
      if (set.indices == nullptr || set.kv == nullptr || set.rows < 1) {
        maps[1 + s] = maps[0];  // never read: the set has no entries
        continue;
      }
      Result<CUtensorMap> kv = Bf16RowsSw128Map(set.kv, static_cast<uint64_t>(set.rows), kDim, 1);
      if (!kv.ok()) return kv.status();
      maps[1 + s] = *kv;
    }
  }
  auto kernel = tma ? SparseAttentionWgmmaKernel<true> : SparseAttentionWgmmaKernel<false>;
  NW_RETURN_IF_ERROR(AllowDynamicSharedMemory(reinterpret_cast<const void*>(kernel),
                                              WgAttnSmem::kAlloc, "SparseAttentionWgmmaKernel"));
  kernel<<<static_cast<unsigned>(p.m), kThreads, WgAttnSmem::kAlloc, stream>>>(maps[0], maps[1],
                                                                               maps[2], p);
  return NW_CUDA_LAUNCH_STATUS("SparseAttentionWgmmaKernel");
}

}  // namespace nw::cuda::detail
