// Indexer logits on tensor cores (see indexer.h).
//
// IndexerMmaKernel (paged keys, or few queries: decode): one query per block, four warps of 16
// heads. Each warp keeps its heads' query fragments in registers for the whole block, multiplies
// them with 64-key tiles in shared memory (mma.sync m16n8k16 bf16, fp32 accumulation; the tile's
// eight independent chains of MMAs back to back), applies ReLU and the head weights, and sums its
// 16 heads with a reduce-scatter of shuffles; the four warps' partial sums are added in a fixed
// order, so the logits are deterministic. Key tiles stream in through a two- or three-stage
// cp.async pipeline (e4m3 tiles are widened to bf16 once per tile in shared memory).
//
// IndexerMmaGroupKernel (contiguous keys, many queries): 128 / HP queries per block, HP = n_heads
// padded to 8, 16, 32 or 64, so the block's 128 (query, head) rows fill eight m16 tiles, two per
// warp. Each key tile in shared memory (two buffers: bf16 tiles arrive by cp.async while the last
// one is multiplied) then serves every query of the block, and each B fragment (ldmatrix) two
// MMAs. Per tile the (query, head) products go through ReLU and the head weights, are summed over
// the heads of a query within each m16 tile by reduce-scatters of shuffles, and the tiles of a
// query are added in ascending order through shared memory.
#include <algorithm>

#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/indexer_impl.cuh"
#include "kernels/cuda/mma.cuh"

namespace nw::cuda::detail {
namespace {

constexpr int kThreads = 128;
constexpr int kTile = 64;
constexpr int kDefaultDecodeStages = 2;  // IndexerMmaKernel's cp.async stages (2 or 3)

// Shared-memory layout of IndexerMmaKernel: kStages staging buffers of kTile key rows as they lie
// in global memory (bf16 or e4m3), each row padded by 16 bytes so that the eight rows an ldmatrix
// reads fall on distinct banks; for e4m3 keys one bf16 buffer the staged tile is widened into;
// the keys' scales per stage; the physical rows of the next two tiles to load; the warps' sums.
template <int kDim, bool kFp8, int kStagesT>
struct DecodeSmem {
  static constexpr int kStages = kStagesT;
  static constexpr int kRowBytes = kFp8 ? kDim : 2 * kDim;  // one key row in global memory
  static constexpr int kStageStride = kRowBytes + 16;       // bytes per staged row
  static constexpr int kBfStride = 2 * kDim + 16;           // bytes per bf16 row (= staged bf16)
  static constexpr int kStageBytes = kTile * kStageStride;
  static constexpr size_t kStaging = 0;
  static constexpr size_t kWide = kStaging + size_t{kStages} * kStageBytes;
  static constexpr size_t kScale = kWide + (kFp8 ? size_t{kTile} * kBfStride : 0);
  static constexpr size_t kRows = kScale + sizeof(float) * kStages * kTile;
  static constexpr size_t kRed = kRows + sizeof(int64_t) * 2 * kTile;
  static constexpr size_t kBytes = kRed + sizeof(float) * 4 * kTile;
};

/// Sums each of v[0..kN) over the 8 row groups g of a warp (lane bits 2, 3, 4) as a
/// reduce-scatter: at level l (lane bit l + 2) a lane keeps half of its values (the upper half
/// where that bit is set), adds its partner's copy of that half and sends the other half, so
/// kN / 2 + kN / 4 + kN / 8 shuffles leave out[e] = the sum of v[kN/2 b0 + kN/4 b1 + kN/8 b2 + e]
/// (g = b0 + 2 b1 + 4 b2). The pairs added are the ones a butterfly over lane bits 2, 3, 4 adds,
/// in the same order, so the sums are the butterfly's bits.
template <int kN>
__device__ __forceinline__ void ReduceScatterRowGroups(const float (&v)[kN], int g,
                                                       float (&out)[kN / 8]) {
  static_assert(kN % 8 == 0);
  float w[kN];
#pragma unroll
  for (int m = 0; m < kN; ++m) w[m] = v[m];
  ReduceScatterLevel<kN / 2>(w, (g & 1) != 0, 4);
  ReduceScatterLevel<kN / 4>(w, (g & 2) != 0, 8);
  ReduceScatterLevel<kN / 8>(w, (g & 4) != 0, 16);
#pragma unroll
  for (int e = 0; e < kN / 8; ++e) out[e] = w[e];
}

// One query per block, its tiles blockIdx.y, blockIdx.y + gridDim.y, ... of kTile keys, loaded
// kStages - 1 tiles ahead with cp.async (a tile's physical rows are looked up one tile earlier
// still, by the first kTile threads). Each warp multiplies its 16 heads' query fragments
// (registers) with the tile, applies ReLU and the head weights and sums its heads with shuffles;
// the four warps' sums are added in a fixed order and scaled by the key's scale.
template <int kDim, bool kFp8, int kStages>
__global__ void __launch_bounds__(kThreads) IndexerMmaKernel(IndexerLogitsParams p) {
  using L = DecodeSmem<kDim, kFp8, kStages>;
  constexpr int kS = L::kStages;
  constexpr int kSteps = kDim / 16;
  constexpr int kChunks = L::kRowBytes / 16;  // 16-byte chunks of a key row
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* staging = smem + L::kStaging;
  unsigned char* wide = smem + L::kWide;
  float* sscale = reinterpret_cast<float*>(smem + L::kScale);               // [kS][kTile]
  int64_t* srow = reinterpret_cast<int64_t*>(smem + L::kRows);              // [2][kTile]
  float(*sred)[kTile] = reinterpret_cast<float(*)[kTile]>(smem + L::kRed);  // [4][kTile]

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int64_t i = blockIdx.x;
  const IndexerKeys keys = QueryKeys(p, i);
  FillTail(p, i, keys.len);
  const int64_t tiles = (keys.len + kTile - 1) / kTile;
  if (static_cast<int64_t>(blockIdx.y) >= tiles) return;
  const int64_t n_local = (tiles - blockIdx.y + gridDim.y - 1) / gridDim.y;  // this block's tiles
  auto tile_start = [&](int64_t u) {
    return (static_cast<int64_t>(blockIdx.y) + u * gridDim.y) * kTile;
  };

  // Query fragments of this warp's heads h0 = 16 warp + g and h1 = h0 + 8 (zero past n_heads).
  const int h0 = warp * 16 + g, h1 = h0 + 8;
  const bool active = warp * 16 < p.n_heads;
  const uint16_t* q = static_cast<const uint16_t*>(p.q) + i * p.n_heads * kDim;
  uint32_t a[kSteps][4];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int c0 = s * 16 + 2 * t4;
    a[s][0] = h0 < p.n_heads ? *reinterpret_cast<const uint32_t*>(q + h0 * kDim + c0) : 0u;
    a[s][1] = h1 < p.n_heads ? *reinterpret_cast<const uint32_t*>(q + h1 * kDim + c0) : 0u;
    a[s][2] = h0 < p.n_heads ? *reinterpret_cast<const uint32_t*>(q + h0 * kDim + c0 + 8) : 0u;
    a[s][3] = h1 < p.n_heads ? *reinterpret_cast<const uint32_t*>(q + h1 * kDim + c0 + 8) : 0u;
  }
  const float w0 = h0 < p.n_heads ? p.w[i * p.n_heads + h0] : 0.0f;
  const float w1 = h1 < p.n_heads ? p.w[i * p.n_heads + h1] : 0.0f;
  float* out = p.out + i * p.out_stride;
  const unsigned char* kbase = static_cast<const unsigned char*>(p.k);

  // Rows of local tile u into srow[u % 2] (the first kTile threads).
  auto lookup = [&](int64_t u) {
    if (threadIdx.x < kTile && u < n_local) {
      srow[(u & 1) * kTile + threadIdx.x] = DecodeKeyRow(p, keys, tile_start(u) + threadIdx.x);
    }
  };
  // cp.async of local tile u (rows from srow[u % 2]) into stage u % kS, zeros for keys past the
  // end or on a missing page; its scales (NaN for a missing page). Always closes a group.
  auto issue = [&](int64_t u) {
    if (u < n_local) {
      const int st = static_cast<int>(u % kS);
      const int64_t* rows = srow + (u & 1) * kTile;
      unsigned char* dst = staging + st * L::kStageBytes;
      for (int c = threadIdx.x; c < kTile * kChunks; c += kThreads) {
        const int r = c / kChunks, cc = c % kChunks;
        const int64_t row = rows[r];
        unsigned char* d = dst + r * L::kStageStride + cc * 16;
        if (row >= 0) {
          CpAsync16(d, kbase + row * L::kRowBytes + cc * 16, true);
        } else {
          *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
        }
      }
      if (threadIdx.x < kTile) {
        const int64_t row = rows[threadIdx.x];
        float* s = sscale + st * kTile + threadIdx.x;
        if (row >= 0 && p.k_scale != nullptr) {
          CpAsync4(s, p.k_scale + row);
        } else {
          *s = row == -1 ? quant::QuietNan() : 1.0f;
        }
      }
    }
    CpAsyncCommit();
  };

  lookup(0);
  __syncthreads();
#pragma unroll
  for (int u = 0; u < kS - 1; ++u) {
    issue(u);
    lookup(u + 1);
    __syncthreads();
  }

  for (int64_t t = 0; t < n_local; ++t) {
    CpAsyncWait<kS - 2>();
    __syncthreads();  // tile t has landed; the buffers of tile t - 1 are free
    issue(t + kS - 1);
    lookup(t + kS);
    const int st = static_cast<int>(t % kS);
    const unsigned char* tile = staging + st * L::kStageBytes;
    if constexpr (kFp8) {
      // Widen the e4m3 tile to bf16 (exactly) once for the four warps.
      for (int c = threadIdx.x; c < kTile * kChunks; c += kThreads) {
        const int r = c / kChunks, cc = c % kChunks;
        const uint4 v = *reinterpret_cast<const uint4*>(tile + r * L::kStageStride + cc * 16);
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        uint32_t b[8];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          b[2 * e] = E4m3x2ToBf16x2(static_cast<uint16_t>(w[e] & 0xFFFFu));
          b[2 * e + 1] = E4m3x2ToBf16x2(static_cast<uint16_t>(w[e] >> 16));
        }
        uint4* dst = reinterpret_cast<uint4*>(wide + r * L::kBfStride + cc * 32);
        dst[0] = make_uint4(b[0], b[1], b[2], b[3]);
        dst[1] = make_uint4(b[4], b[5], b[6], b[7]);
      }
      __syncthreads();
      tile = wide;
    }

    if (active) {
      // ldmatrix row addresses: matrix lane / 8 = columns 8 (lane / 8) of two k steps.
      const unsigned char* bl = tile + (lane & 7) * L::kBfStride + (lane >> 3) * 16;
      // v[2 nt + e]: this thread's two heads' ReLU'd, weighted products for key nt 8 + 2 t4 + e.
      float v[2 * (kTile / 8)];
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt) {
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int s = 0; s < kSteps; s += 2) {
          uint32_t b[4];
          LdMatrixX4(b, bl + nt * 8 * L::kBfStride + s * 32);
          MmaBf16(c, a[s], b[0], b[1]);
          MmaBf16(c, a[s + 1], b[2], b[3]);
        }
        // ReLU (c < 0 ? 0 : c, like std::max(c, 0)) and the head weights.
        v[2 * nt] = w0 * (c[0] < 0.0f ? 0.0f : c[0]) + w1 * (c[2] < 0.0f ? 0.0f : c[2]);
        v[2 * nt + 1] = w0 * (c[1] < 0.0f ? 0.0f : c[1]) + w1 * (c[3] < 0.0f ? 0.0f : c[3]);
      }
      // Sum over the 8 row groups g: this lane gets v index 8 b0 + 4 b1 + 2 b2 + e, i.e. key
      // nt 8 + 2 t4 + e with nt = 4 b0 + 2 b1 + b2.
      float w2[2];
      ReduceScatterRowGroups(v, g, w2);
      const int nt = ((g & 1) << 2) | (g & 2) | ((g >> 2) & 1);
      *reinterpret_cast<float2*>(&sred[warp][nt * 8 + 2 * t4]) = make_float2(w2[0], w2[1]);
    } else {
      for (int r = lane; r < kTile; r += 32) sred[warp][r] = 0.0f;
    }
    __syncthreads();
    if (threadIdx.x < kTile) {
      const int r = threadIdx.x;
      const int64_t j = tile_start(t) + r;
      if (j < keys.len) {
        out[j] = sscale[st * kTile + r] * (((sred[0][r] + sred[1][r]) + sred[2][r]) + sred[3][r]);
      }
    }
  }
  CpAsyncWait<0>();  // no copy outlives the block (the trailing groups are empty)
}

constexpr int kGroupRows = 128;  // (query, head) rows of a group block: 8 m16 tiles, 2 per warp

// kHp8: 8 padded heads a query (the two halves of an m16 tile are two queries); else 16, 32 or
// 64 (an m16 tile is 16 heads of one query).
template <int kDim, bool kFp8, bool kHp8>
__global__ void __launch_bounds__(kThreads, 3)
    IndexerMmaGroupKernel(IndexerLogitsParams p, int hp) {
  constexpr int kStride = kDim + 8;
  constexpr int kSteps = kDim / 16;
  constexpr int kMaxQ = kGroupRows / 8;
  __shared__ __align__(16) uint16_t sk[2][kTile * kStride];  // two key tiles (cp.async)
  __shared__ float sscale[2][kTile];
  __shared__ float sred[8][2][kTile];  // [m16 tile][row half, for hp 8][key]
  __shared__ IndexerKeys keys[kMaxQ];
  __shared__ bool s_same;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int nq_max = kGroupRows / hp;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * nq_max;
  const int nq = static_cast<int>(min(static_cast<int64_t>(nq_max), p.m - i0));
  for (int q = 0; q < nq; ++q) FillTail(p, i0 + q, QueryKeys(p, i0 + q).len);
  if (threadIdx.x == 0) {
    bool same = true;
    for (int q = 0; q < nq; ++q) {
      keys[q] = QueryKeys(p, i0 + q);
      same = same && keys[q].base == keys[0].base;
    }
    s_same = same;
  }
  __syncthreads();

  // Row r = 16 mt + (g or g + 8) of this warp's tiles mt = 2 warp + u: query r / hp, head r % hp.
  uint32_t a[2][kSteps][4];
  float wt[2][2];
#pragma unroll
  for (int u = 0; u < 2; ++u) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = 16 * (2 * warp + u) + g + 8 * half;
      const int q = r / hp, h = r % hp;
      const bool live = q < nq && h < p.n_heads;
      wt[u][half] = live ? p.w[(i0 + q) * p.n_heads + h] : 0.0f;
      const uint16_t* qrow = static_cast<const uint16_t*>(p.q) + ((i0 + q) * p.n_heads + h) * kDim;
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const int c0 = s * 16 + 2 * t4;
        a[u][s][half] = live ? *reinterpret_cast<const uint32_t*>(qrow + c0) : 0u;
        a[u][s][half + 2] = live ? *reinterpret_cast<const uint32_t*>(qrow + c0 + 8) : 0u;
      }
    }
  }
  // ldmatrix row addresses: matrix lane / 8 = columns 8 (lane / 8) of two k steps.
  const int ld_off = (lane & 7) * kStride + (lane >> 3) * 8;

  // One pass with every query when they share their key rows (a prefill chunk's do), else one
  // pass per query (the other queries' products are computed and dropped).
  const int passes = s_same ? 1 : nq;
  for (int pass = 0; pass < passes; ++pass) {
    const int q_lo = s_same ? 0 : pass, q_hi = s_same ? nq : pass + 1;
    int64_t len_max = 0;
    for (int q = q_lo; q < q_hi; ++q) len_max = max(len_max, keys[q].len);
    const int64_t base = keys[q_lo].base;
    const int64_t tiles = (len_max + kTile - 1) / kTile;
    const int64_t n_local = static_cast<int64_t>(blockIdx.y) < tiles
                                ? (tiles - blockIdx.y + gridDim.y - 1) / gridDim.y
                                : 0;
    auto tile_start = [&](int64_t u) {
      return (static_cast<int64_t>(blockIdx.y) + u * gridDim.y) * kTile;
    };
    // Local tile u into buffer u % 2: bf16 rows by cp.async, e4m3 rows widened on the way in;
    // zeros past len_max. Always closes a cp.async group.
    auto issue = [&](int64_t u) {
      if (u < n_local) {
        const int64_t j0 = tile_start(u);
        uint16_t* dst = sk[u & 1];
        if constexpr (!kFp8) {
          constexpr int kChunks = kDim / 8;
          const uint16_t* k = static_cast<const uint16_t*>(p.k);
          for (int c = threadIdx.x; c < kTile * kChunks; c += kThreads) {
            const int r = c / kChunks, cc = c % kChunks;
            const int64_t j = j0 + r;
            uint16_t* d = dst + r * kStride + cc * 8;
            if (j < len_max) {
              CpAsync16(d, k + (base + j) * kDim + cc * 8, true);
            } else {
              *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
            }
          }
        } else {
          constexpr int kChunks = kDim / 16;
          const uint8_t* k = static_cast<const uint8_t*>(p.k);
          for (int c = threadIdx.x; c < kTile * kChunks; c += kThreads) {
            const int r = c / kChunks, cc = c % kChunks;
            const int64_t j = j0 + r;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (j < len_max) v = *reinterpret_cast<const uint4*>(k + (base + j) * kDim + cc * 16);
            const uint32_t wv[4] = {v.x, v.y, v.z, v.w};
            uint32_t b[8];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              b[2 * e] = E4m3x2ToBf16x2(static_cast<uint16_t>(wv[e] & 0xFFFFu));
              b[2 * e + 1] = E4m3x2ToBf16x2(static_cast<uint16_t>(wv[e] >> 16));
            }
            uint4* d = reinterpret_cast<uint4*>(dst + r * kStride + cc * 16);
            d[0] = make_uint4(b[0], b[1], b[2], b[3]);
            d[1] = make_uint4(b[4], b[5], b[6], b[7]);
          }
        }
        for (int r = threadIdx.x; r < kTile; r += kThreads) {
          const int64_t j = j0 + r;
          sscale[u & 1][r] = (p.k_scale != nullptr && j < len_max) ? p.k_scale[base + j] : 1.0f;
        }
      }
      CpAsyncCommit();
    };

    issue(0);
    for (int64_t t = 0; t < n_local; ++t) {
      __syncthreads();  // tile t - 1 is no longer read (its buffer, scales and sred are free)
      issue(t + 1);
      CpAsyncWait<1>();
      __syncthreads();  // tile t has landed
      const int64_t j0 = tile_start(t);
      const uint16_t* tile = sk[t & 1] + ld_off;
      // Two n8 tiles at a time: 2 x 2 independent MMA chains, then ReLU and the head weights, then
      // the sums over the row groups g by reduce-scatters (each lane keeps one sum of eight).
#pragma unroll
      for (int nt = 0; nt < kTile / 8; nt += 2) {
        float c[2][2][4] = {};
#pragma unroll
        for (int s = 0; s < kSteps; s += 2) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            uint32_t b[4];
            LdMatrixX4(b, tile + (nt + e) * 8 * kStride + s * 16);
            MmaBf16(c[e][0], a[0][s], b[0], b[1]);
            MmaBf16(c[e][1], a[1][s], b[0], b[1]);
            MmaBf16(c[e][0], a[0][s + 1], b[2], b[3]);
            MmaBf16(c[e][1], a[1][s + 1], b[2], b[3]);
          }
        }
        // r[e][u][x]: ReLU (c < 0 ? 0 : c) times the row's head weight.
        float r[2][2][4];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
#pragma unroll
          for (int u = 0; u < 2; ++u) {
#pragma unroll
            for (int x = 0; x < 4; ++x) {
              r[e][u][x] = wt[u][x / 2] * (c[e][u][x] < 0.0f ? 0.0f : c[e][u][x]);
            }
          }
        }
        if constexpr (kHp8) {
          // The halves are two queries: per n8 tile e, v = (u, x) over the four (half, key).
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float v[8];
#pragma unroll
            for (int u = 0; u < 2; ++u) {
#pragma unroll
              for (int x = 0; x < 4; ++x) v[4 * u + x] = r[e][u][x];
            }
            const int idx = ((g & 1) << 2) | (g & 2) | ((g >> 2) & 1);
            float sum[1];
            ReduceScatterRowGroups(v, g, sum);
            const int u = idx >> 2, x = idx & 3;
            sred[2 * warp + u][x >> 1][(nt + e) * 8 + 2 * t4 + (x & 1)] = sum[0];
          }
        } else {
          // One query's 16 heads: v = (e, u, key parity) of the two halves' sum.
          float v[8];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
#pragma unroll
            for (int u = 0; u < 2; ++u) {
              v[4 * e + 2 * u] = r[e][u][0] + r[e][u][2];
              v[4 * e + 2 * u + 1] = r[e][u][1] + r[e][u][3];
            }
          }
          const int idx = ((g & 1) << 2) | (g & 2) | ((g >> 2) & 1);
          float sum[1];
          ReduceScatterRowGroups(v, g, sum);
          const int e = idx >> 2, u = (idx >> 1) & 1, x = idx & 1;
          sred[2 * warp + u][0][(nt + e) * 8 + 2 * t4 + x] = sum[0];
        }
      }
      __syncthreads();
      // Each query's tiles in ascending order, then the key scale; row-contiguous stores.
      const int tiles_per_q = hp / 16;  // 0 for hp 8
      for (int c = threadIdx.x; c < (q_hi - q_lo) * kTile; c += kThreads) {
        const int q = q_lo + c / kTile, r = c % kTile;
        const int64_t j = j0 + r;
        if (j >= keys[q].len) continue;
        float sum;
        if constexpr (kHp8) {
          sum = sred[q / 2][q % 2][r];
        } else {
          sum = sred[q * tiles_per_q][0][r];
          for (int t2 = 1; t2 < tiles_per_q; ++t2) sum += sred[q * tiles_per_q + t2][0][r];
        }
        p.out[(i0 + q) * p.out_stride + j] = sscale[t & 1][r] * sum;
      }
    }
    CpAsyncWait<0>();  // the trailing group is empty
    __syncthreads();   // sk, sscale and sred are reused by the next pass
  }
}

}  // namespace

Status LaunchIndexerMmaGroup(const IndexerLogitsParams& p, int64_t max_len, cudaStream_t stream) {
  if ((reinterpret_cast<uintptr_t>(p.k) % 16) != 0 || (reinterpret_cast<uintptr_t>(p.q) % 4) != 0) {
    return Status::InvalidArgument("IndexerLogits: k must be 16-byte and q 4-byte aligned");
  }
  const int hp = p.n_heads <= 8 ? 8 : p.n_heads <= 16 ? 16 : p.n_heads <= 32 ? 32 : 64;
  const int64_t per_block = kGroupRows / hp;
  const int64_t blocks = (p.m + per_block - 1) / per_block;
  if (blocks > 0x7FFFFFFF) return Status::InvalidArgument("IndexerLogits: too many queries");
  const int64_t tiles = (max_len + kTile - 1) / kTile;
  // Split the keys only when the queries alone give fewer than four blocks per multiprocessor.
  const int64_t want = (4LL * MultiprocessorCount() + blocks - 1) / blocks;
  const dim3 grid(static_cast<unsigned>(blocks),
                  static_cast<unsigned>(std::clamp<int64_t>(std::min(want, tiles), 1, 65535)));
  const bool fp8 = p.k_format == IndexerKeyFormat::kFp8;
  auto launch = [&](auto kernel) { kernel<<<grid, kThreads, 0, stream>>>(p, hp); };
  if (p.head_dim == 128) {
    if (hp == 8) {
      fp8 ? launch(IndexerMmaGroupKernel<128, true, true>)
          : launch(IndexerMmaGroupKernel<128, false, true>);
    } else {
      fp8 ? launch(IndexerMmaGroupKernel<128, true, false>)
          : launch(IndexerMmaGroupKernel<128, false, false>);
    }
  } else {
    if (hp == 8) {
      fp8 ? launch(IndexerMmaGroupKernel<64, true, true>)
          : launch(IndexerMmaGroupKernel<64, false, true>);
    } else {
      fp8 ? launch(IndexerMmaGroupKernel<64, true, false>)
          : launch(IndexerMmaGroupKernel<64, false, false>);
    }
  }
  return NW_CUDA_LAUNCH_STATUS("IndexerMmaGroupKernel");
}

template <int kDim, bool kFp8, int kStages>
Status LaunchDecode(const IndexerLogitsParams& p, unsigned splits, cudaStream_t stream) {
  void (*kernel)(IndexerLogitsParams) = IndexerMmaKernel<kDim, kFp8, kStages>;
  constexpr size_t kBytes = DecodeSmem<kDim, kFp8, kStages>::kBytes;
  NW_RETURN_IF_ERROR(
      AllowDynamicSharedMemory(reinterpret_cast<const void*>(kernel), kBytes, "IndexerMmaKernel"));
  kernel<<<dim3(static_cast<unsigned>(p.m), splits), kThreads, kBytes, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("IndexerMmaKernel");
}

template <int kDim, bool kFp8>
Status LaunchDecodeStages(const IndexerLogitsParams& p, unsigned splits, cudaStream_t stream) {
  const int stages = p.decode_stages == 0 ? kDefaultDecodeStages : p.decode_stages;
  if (stages >= 3) return LaunchDecode<kDim, kFp8, 3>(p, splits, stream);
  return LaunchDecode<kDim, kFp8, 2>(p, splits, stream);
}

Status LaunchIndexerMma(const IndexerLogitsParams& p, unsigned splits, cudaStream_t stream) {
  if ((reinterpret_cast<uintptr_t>(p.k) % 16) != 0 || (reinterpret_cast<uintptr_t>(p.q) % 4) != 0 ||
      (p.k_scale != nullptr && (reinterpret_cast<uintptr_t>(p.k_scale) % 4) != 0)) {
    return Status::InvalidArgument(
        "IndexerLogits: k must be 16-byte, q and k_scale 4-byte aligned");
  }
  const bool fp8 = p.k_format == IndexerKeyFormat::kFp8;
  if (p.head_dim == 128) {
    return fp8 ? LaunchDecodeStages<128, true>(p, splits, stream)
               : LaunchDecodeStages<128, false>(p, splits, stream);
  }
  return fp8 ? LaunchDecodeStages<64, true>(p, splits, stream)
             : LaunchDecodeStages<64, false>(p, splits, stream);
}

}  // namespace nw::cuda::detail
