// Indexer logits of a prefill (contiguous keys, many queries) on Hopper's wgmma (see indexer.h).
//
// The product is a GEMM with keys as rows: D[key, (query, head)] = key . q[query, head], K =
// head_dim. A block holds 2 * 256 / HP queries (HP = n_heads padded to 8, 16, 32 or 64) as the
// B operands of two consumer warpgroups (256 (query, head) columns each, written once into shared
// memory in the 128-byte swizzled K-major layout), and streams 64-key tiles (the A operand) from
// global memory through a 4-stage ring filled by a producer warp with bulk tensor copies (TMA,
// completing on mbarriers). For each tile each consumer issues head_dim / 16 wgmma
// m64n256k16 (bf16, fp32 accumulators in registers), then applies ReLU and the head weights and
// sums the heads of each query: a thread holds two keys x 2 columns of every n8 block, so the sum
// is over its own registers first, then over the 4 lanes of a quad (a reduce-scatter of
// shuffles). The two consumers take turns through named barriers (ping-pong): one issues its
// MMAs while the other runs its epilogue, so the tensor cores stay busy. A consumer releases a
// stage (mbarrier arrive, one per warp) once its MMAs on it have completed.
//
// A block's key rows are the union of its queries' ranges [ks, ke); tiles no query of the block
// reads are skipped. A prefill chunk's queries share ks, so every tile serves every query. The
// logits are deterministic (fixed summation order) and within the bf16 bound of the CPU's.
#include <algorithm>

#include "kernels/cuda/common.h"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/indexer_impl.cuh"
#include "kernels/cuda/tensor_map.h"

namespace nw::cuda::detail {
namespace {

constexpr int kCols = 256;  // (query, head) columns of a consumer warpgroup: wgmma N
constexpr int kKeys = 64;   // keys of a tile: wgmma M
constexpr int kConsumers = 2;
constexpr int kStages = 4;
constexpr int kConsumerThreads = 128 * kConsumers;
constexpr int kThreadsW = kConsumerThreads + 32;  // + the producer warp
constexpr int kMaxQueries = kConsumers * kCols / 8;

/// Dynamic shared memory (offsets from a 1024-byte aligned base): the key tile ring
/// [kStages][head_dim / 64][64 rows x 128 bytes], the consumers' query operands
/// [kConsumers][head_dim / 64][256 rows x 128 bytes], their head weights [kConsumers][256],
/// the full and empty barriers of the ring, the queries' key base and length.
template <int kDim>
struct WgSmem {
  static constexpr int kSub = kDim / 64;  // 128-byte swizzle atoms along K
  static constexpr size_t kSubA = size_t{kKeys} * 128;
  static constexpr size_t kSubB = size_t{kCols} * 128;
  static constexpr size_t kTileBytes = kSub * kSubA;
  static constexpr size_t kA = 0;
  static constexpr size_t kB = kA + kStages * kTileBytes;
  static constexpr size_t kW = kB + kConsumers * kSub * kSubB;
  static constexpr size_t kBar = kW + sizeof(float) * kConsumers * kCols;
  static constexpr size_t kBase = kBar + sizeof(uint64_t) * 2 * kStages;
  static constexpr size_t kLen = kBase + sizeof(int64_t) * kMaxQueries;
  static constexpr size_t kBytes = kLen + sizeof(int64_t) * kMaxQueries;
  static constexpr size_t kAlloc = kBytes + 1024;  // room to align the base
};

/// Sums v over the 4 lanes of a quad (lane bits 0 and 1) as a reduce-scatter: the lane with
/// t4 = b0 + 2 b1 gets out[e] = the quad's sum of v[kN/2 b0 + kN/4 b1 + e].
template <int kN>
__device__ __forceinline__ void ReduceScatterQuad(const float (&v)[kN], int t4,
                                                  float (&out)[kN / 4]) {
  float w[kN];
#pragma unroll
  for (int m = 0; m < kN; ++m) w[m] = v[m];
  ReduceScatterLevel<kN / 2>(w, (t4 & 1) != 0, 1);
  ReduceScatterLevel<kN / 4>(w, (t4 & 2) != 0, 2);
#pragma unroll
  for (int e = 0; e < kN / 4; ++e) out[e] = w[e];
}

template <int kDim, int kHp>
__global__ void __launch_bounds__(kThreadsW, 1)
    IndexerWgmmaKernel(const __grid_constant__ CUtensorMap kmap, IndexerLogitsParams p) {
  using L = WgSmem<kDim>;
  constexpr int kQc = kCols / kHp;       // queries of a consumer
  constexpr int kQb = kConsumers * kQc;  // queries of the block
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = Align1024(smem_raw);
  unsigned char* sa = smem + L::kA;
  unsigned char* sb = smem + L::kB;
  float* sw = reinterpret_cast<float*>(smem + L::kW);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::kBar);
  uint64_t* empty = full + kStages;
  int64_t* sbase = reinterpret_cast<int64_t*>(smem + L::kBase);
  int64_t* slen = reinterpret_cast<int64_t*>(smem + L::kLen);

  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kQb;
  const int nq = static_cast<int>(min(static_cast<int64_t>(kQb), p.m - i0));
  for (int q = threadIdx.x; q < kQb; q += kThreadsW) {
    const IndexerKeys keys =
        q < nq ? QueryKeys(p, i0 + q) : IndexerKeys{0, 0, static_cast<const int32_t*>(nullptr)};
    sbase[q] = keys.base;
    slen[q] = keys.len;
  }
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      MbarInit(&full[s], 1);
      MbarInit(&empty[s], kConsumers * 4);
    }
    MbarInitFence();
  }
  if (threadIdx.x < kConsumerThreads) {
    // The consumer's B operand: column n = query (n / kHp), head (n % kHp), zeros past n_heads
    // and past the last query; and the columns' head weights.
    const int c = threadIdx.x / 128, t = threadIdx.x % 128;
    constexpr int kChunks = kDim / 8;  // 16-byte chunks of a query row
    const uint16_t* q = static_cast<const uint16_t*>(p.q);
    unsigned char* b = sb + c * L::kSub * L::kSubB;
    for (int idx = t; idx < kCols * kChunks; idx += 128) {
      const int n = idx / kChunks, ch = idx % kChunks;
      const int ql = c * kQc + n / kHp, h = n % kHp;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (ql < nq && h < p.n_heads) {
        v = *reinterpret_cast<const uint4*>(q + ((i0 + ql) * p.n_heads + h) * kDim + ch * 8);
      }
      *reinterpret_cast<uint4*>(b + (ch / 8) * L::kSubB + SwizzledChunk(n, ch % 8)) = v;
    }
    for (int n = t; n < kCols; n += 128) {
      const int ql = c * kQc + n / kHp, h = n % kHp;
      sw[c * kCols + n] = (ql < nq && h < p.n_heads) ? p.w[(i0 + ql) * p.n_heads + h] : 0.0f;
    }
    FenceProxyAsync();
  }
  __syncthreads();
  for (int q = 0; q < nq; ++q) FillTail(p, i0 + q, slen[q]);

  // The block's key rows [lo, hi): the union of its queries' ranges.
  int64_t lo = INT64_MAX, hi = 0;
  bool same = true;
  for (int q = 0; q < nq; ++q) {
    if (slen[q] == 0) continue;
    if (lo != INT64_MAX && sbase[q] != lo) same = false;
    lo = min(lo, sbase[q]);
    hi = max(hi, sbase[q] + slen[q]);
  }
  if (hi == 0) return;
  const int64_t tiles = (hi - lo + kKeys - 1) / kKeys;
  // Whether some query of the block reads a key of tile t (every tile does when all share ks).
  auto needed = [&](int64_t t) {
    if (same) return true;
    const int64_t r0 = lo + t * kKeys;
    for (int q = 0; q < nq; ++q) {
      if (slen[q] > 0 && sbase[q] < r0 + kKeys && sbase[q] + slen[q] > r0) return true;
    }
    return false;
  };

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (warp == kConsumerThreads / 32) {
    // Producer: one thread issues the copies of this block's needed tiles into the ring.
    if (lane == 0) {
      int it = 0;
      for (int64_t t = blockIdx.y; t < tiles; t += gridDim.y) {
        if (!needed(t)) continue;
        const int st = it % kStages;
        if (it >= kStages) MbarWait(&empty[st], ((it / kStages) - 1) & 1);
        MbarArriveExpectTx(&full[st], static_cast<uint32_t>(L::kTileBytes));
        const int32_t y = static_cast<int32_t>(lo + t * kKeys);
#pragma unroll
        for (int kb = 0; kb < L::kSub; ++kb) {
          TmaLoad2d(sa + st * L::kTileBytes + kb * L::kSubA, &kmap, kb * 64, y, &full[st]);
        }
        ++it;
      }
    }
    return;
  }

  // Consumers.
  const int c = warp / 4, wq = warp % 4, g = lane >> 2, t4 = lane & 3;
  int n_tiles = 0;
  for (int64_t t = blockIdx.y; t < tiles; t += gridDim.y) n_tiles += needed(t) ? 1 : 0;
  const uint64_t db = Sw128Desc(sb + c * L::kSub * L::kSubB);
  const float* swc = sw + c * kCols;
  float* out = p.out;
  float d[128];
#pragma unroll
  for (int e = 0; e < 128; ++e) d[e] = 0.0f;
  int it = 0;
  for (int64_t t = blockIdx.y; t < tiles; t += gridDim.y) {
    if (!needed(t)) continue;
    const int st = it % kStages;
    MbarWait(&full[st], (it / kStages) & 1);
    // Turns: consumer 0 issues tile k after consumer 1 has issued tile k - 1, consumer 1 after
    // consumer 0 has issued tile k.
    if (c == 0) {
      if (it > 0) NamedBarrierSync(1, kConsumerThreads);
    } else {
      NamedBarrierSync(2, kConsumerThreads);
    }
    WgmmaFenceOperands(d);
    WgmmaFence();
    const uint64_t da = Sw128Desc(sa + st * L::kTileBytes);
#pragma unroll
    for (int s = 0; s < kDim / 16; ++s) {
      const uint32_t kb = s / 4, off = (s % 4) * 32;
      WgmmaM64N256K16Bf16(d, DescPlus(da, kb * L::kSubA + off), DescPlus(db, kb * L::kSubB + off),
                          s > 0 ? 1 : 0);
    }
    WgmmaCommit();
    if (c == 0) {
      NamedBarrierArrive(2, kConsumerThreads);
    } else if (it + 1 < n_tiles) {
      NamedBarrierArrive(1, kConsumerThreads);
    }
    WgmmaWait<0>();
    WgmmaFenceOperands(d);
    __syncwarp();
    if (lane == 0) MbarArrive(&empty[st]);

    // Epilogue: keys r0 = this thread's row and r0 + 8; per query the ReLU'd, weighted products
    // of the thread's columns, then the quad's reduce-scatter over groups of 4 queries.
    const int64_t r0 = lo + t * kKeys + 16 * wq + g;
    float scale[2] = {1.0f, 1.0f};
    if (p.k_scale != nullptr) {
      scale[0] = r0 < p.key_rows ? p.k_scale[r0] : 0.0f;
      scale[1] = r0 + 8 < p.key_rows ? p.k_scale[r0 + 8] : 0.0f;
    }
#pragma unroll
    for (int qg = 0; qg < kQc; qg += 4) {
      float v[8];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int jj = 0; jj < kHp / 8; ++jj) {
          const int j = (qg + e) * (kHp / 8) + jj;
          const float2 wv = *reinterpret_cast<const float2*>(swc + 8 * j + 2 * t4);
          s0 += wv.x * (d[4 * j] < 0.0f ? 0.0f : d[4 * j]) +
                wv.y * (d[4 * j + 1] < 0.0f ? 0.0f : d[4 * j + 1]);
          s1 += wv.x * (d[4 * j + 2] < 0.0f ? 0.0f : d[4 * j + 2]) +
                wv.y * (d[4 * j + 3] < 0.0f ? 0.0f : d[4 * j + 3]);
        }
        v[2 * e] = s0;
        v[2 * e + 1] = s1;
      }
      float o[2];
      ReduceScatterQuad(v, t4, o);
      // This lane now holds query qg + 2 b0 + b1 (t4 = b0 + 2 b1) at rows r0 and r0 + 8.
      const int ql = c * kQc + qg + 2 * (t4 & 1) + (t4 >> 1);
      if (ql < nq) {
        const int64_t base = sbase[ql], len = slen[ql];
        float* orow = out + (i0 + ql) * p.out_stride;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int64_t j = r0 + 8 * half - base;
          if (j >= 0 && j < len) orow[j] = scale[half] * o[half];
        }
      }
    }
    ++it;
  }
}

template <int kDim, int kHp>
Status LaunchFor(const CUtensorMap& map, const IndexerLogitsParams& p, int64_t max_len,
                 cudaStream_t stream) {
  void (*kernel)(const CUtensorMap, IndexerLogitsParams) = IndexerWgmmaKernel<kDim, kHp>;
  constexpr size_t kBytes = WgSmem<kDim>::kAlloc;
  NW_RETURN_IF_ERROR(AllowDynamicSharedMemory(reinterpret_cast<const void*>(kernel), kBytes,
                                              "IndexerWgmmaKernel"));
  const int64_t per_block = kConsumers * kCols / kHp;
  const int64_t blocks = (p.m + per_block - 1) / per_block;
  if (blocks > 0x7FFFFFFF) return Status::InvalidArgument("IndexerLogits: too many queries");
  // One block a multiprocessor: split the keys when the queries give fewer than two waves.
  const int64_t tiles = (max_len + kKeys - 1) / kKeys;
  int64_t want = (2LL * MultiprocessorCount() + blocks - 1) / blocks;
  if (p.prefill_key_splits > 0) want = p.prefill_key_splits;
  const dim3 grid(static_cast<unsigned>(blocks),
                  static_cast<unsigned>(std::clamp<int64_t>(std::min(want, tiles), 1, 65535)));
  kernel<<<grid, kThreadsW, kBytes, stream>>>(map, p);
  return NW_CUDA_LAUNCH_STATUS("IndexerWgmmaKernel");
}

template <int kDim>
Status LaunchForDim(const CUtensorMap& map, const IndexerLogitsParams& p, int64_t max_len,
                    cudaStream_t stream) {
  if (p.n_heads <= 8) return LaunchFor<kDim, 8>(map, p, max_len, stream);
  if (p.n_heads <= 16) return LaunchFor<kDim, 16>(map, p, max_len, stream);
  if (p.n_heads <= 32) return LaunchFor<kDim, 32>(map, p, max_len, stream);
  return LaunchFor<kDim, 64>(map, p, max_len, stream);
}

}  // namespace

bool WgmmaIndexerApplies(const IndexerLogitsParams& p) {
  return p.k_format == IndexerKeyFormat::kBf16 && p.block_table == nullptr &&
         reinterpret_cast<uintptr_t>(p.q) % 16 == 0 && reinterpret_cast<uintptr_t>(p.k) % 16 == 0 &&
         (p.k_scale == nullptr || reinterpret_cast<uintptr_t>(p.k_scale) % 4 == 0) &&
         p.key_rows >= 1 && p.key_rows < 0x7FFFFFFF;
}

Status LaunchIndexerWgmma(const IndexerLogitsParams& p, int64_t max_len, cudaStream_t stream) {
  Result<CUtensorMap> map = Bf16RowsSw128Map(p.k, static_cast<uint64_t>(p.key_rows),
                                             static_cast<uint64_t>(p.head_dim), kKeys);
  if (!map.ok()) return map.status();
  if (p.head_dim == 128) return LaunchForDim<128>(*map, p, max_len, stream);
  return LaunchForDim<64>(*map, p, max_len, stream);
}

}  // namespace nw::cuda::detail
