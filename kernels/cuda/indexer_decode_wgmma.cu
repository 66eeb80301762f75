// Decode indexer logits on Hopper's wgmma (see indexer.h): one query per block of one warpgroup,
// its key tiles blockIdx.y, blockIdx.y + gridDim.y, ... (paged keys, or fewer than 16 queries).
//
// The 64 keys of a tile are wgmma's M (warp w: keys 16 w .. 16 w + 15) and the query's heads,
// zero-padded to kN = 16, 32 or 64, its N; K runs over the head dimension. Keys are the A
// operand from registers: a tile arrives raw (bf16 or e4m3 rows, swizzled) by cp.async, and each
// thread reads its own rows' fragments straight from it, widening e4m3 to bf16 exactly in
// registers: no widened copy in shared memory and no barrier for one. The query is B, in shared
// memory (SW128, K-major), staged once per block.
//
// A permutation of K keeps those reads wide: the 32 dims 32 c .. 32 c + 31 feed k16 steps 2 c and
// 2 c + 1, and the thread with t4 = lane % 4 reads dims 32 c + 8 t4 .. + 7 (8 bytes of e4m3, 16 of
// bf16) of each of its two rows. Fragment slot 2 t4 + b of step 2 c + s then holds dim
// 32 c + 8 t4 + 4 s + b and slot 8 + 2 t4 + b dim 32 c + 8 t4 + 4 s + 2 + b; the query is staged
// with the same permutation, so every product q_d k_d is formed once, as before.
//
// When no tile straddles a page (contiguous keys, or pages of a multiple of 64 keys) and a block
// has at most kMaxBases tiles, the physical row of each tile's first key is read from the block
// table once, before anything else, and a tile with all its keys present is copied as one
// contiguous run: no page-table read waits inside the loop. The first tiles' copies go out
// before the query is staged, so the two overlap; the query is read from global memory once.
//
// Per tile: 8 (kDim 128) wgmma m64nNk16 into kN / 2 fp32 accumulators a thread (key rows g and
// g + 8 of its warp, heads 8 j + 2 t4 + {0, 1}); ReLU and the head weights, the thread's heads
// summed in ascending j, then across the four lanes of a quad by a butterfly (the same bits in
// every lane); times the key's scale. Deterministic; the logits do not depend on the tiles per
// block or the stages. Within the tensor-core paths' bound of the CPU's (the products are exact,
// the fp32 sums' order differs).
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/indexer_impl.cuh"
#include "kernels/cuda/mma.cuh"

namespace nw::cuda::detail {
namespace {

constexpr int kThreads = 128;
constexpr int kTile = 64;
// Copy stages when the caller leaves them to us. The H200 at 32 tiles a block: bf16 keys ran 2
// fastest (session 15: 16 KB tiles, two blocks a multiprocessor fewer with more); e4m3 keys ran
// 4 fastest once no page-table read waited inside the loop (session 20: 0.113 against 0.120 ms).
template <bool kFp8>
constexpr int kDefaultStages = kFp8 ? 4 : 2;
// Most tiles a block whose first physical rows are looked up once, up front (see `by_tile`).
constexpr int kMaxBases = 64;

template <int kDim, bool kFp8, int kN, int kStagesT>
struct DecodeWgSmem {
  static constexpr int kStages = kStagesT;
  static constexpr int kRowBytes = kFp8 ? kDim : 2 * kDim;  // one key row, as in global memory
  static constexpr int kQAtom = kN * 128;  // one 64-dim slice of the query: kN rows x 128 bytes
  static constexpr size_t kQ = 0;          // [kDim / 64][kN rows x 128 B], SW128
  static constexpr size_t kStage = kQ + size_t{kDim / 64} * kQAtom;  // [kStages][64 rows]
  static constexpr size_t kStageBytes = size_t{kTile} * kRowBytes;
  static constexpr size_t kScale = kStage + kStages * kStageBytes;           // float [S][64]
  static constexpr size_t kRows = kScale + sizeof(float) * kStages * kTile;  // int64 [2][64]
  static constexpr size_t kBase = kRows + sizeof(int64_t) * 2 * kTile;       // int64 [kMaxBases]
  static constexpr size_t kW = kBase + sizeof(int64_t) * kMaxBases;          // float [kN]
  static constexpr size_t kRed = kW + sizeof(float) * kN;                    // float [4]
  static constexpr size_t kBytes = kRed + sizeof(float) * 4;
  static constexpr size_t kAlloc = kBytes + 1024;  // room to align the base to 1024
};

/// The XOR (in 16-byte chunks) of row r's chunks in a staged tile, chosen so that the fragment
/// reads of a warp fall on distinct banks: 8-byte reads (e4m3) of chunk 2 c + t4 / 2 by four
/// rows a half-warp; 16-byte reads (bf16) of chunk 4 c + t4 by two rows a quarter-warp.
template <int kDim, bool kFp8>
__device__ __forceinline__ int RowSwizzle(int r) {
  if constexpr (kFp8) {
    return kDim == 128 ? (2 * r) & 6 : r & 2;
  } else {
    return (r & 1) << 2;
  }
}

/// max(x, 0) with NaN kept (`max.NaN`: one instruction for the compare and select of
/// x < 0 ? 0 : x, the CPU's std::max(x, 0.0f); -0 becomes +0, which adds the same).
__device__ __forceinline__ float ReluKeepNan(float x) {
  float y;
  asm("max.NaN.f32 %0, %1, 0f00000000;" : "=f"(y) : "f"(x));
  return y;
}

template <int kDim, bool kFp8, int kN, int kStages>
__global__ void __launch_bounds__(kThreads, kN == 64 && !kFp8 ? 3 : 4)
    IndexerDecodeWgmmaKernel(IndexerLogitsParams p) {
  using L = DecodeWgSmem<kDim, kFp8, kN, kStages>;
  constexpr int kS = kStages;
  constexpr int kSteps = kDim / 16;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = Align1024(smem_raw);
  unsigned char* sq = smem + L::kQ;
  unsigned char* staging = smem + L::kStage;
  float* sscale = reinterpret_cast<float*>(smem + L::kScale);    // [kS][kTile]
  int64_t* srow = reinterpret_cast<int64_t*>(smem + L::kRows);   // [2][kTile]
  float* sw8 = reinterpret_cast<float*>(smem + L::kW);           // [kN] head weights, 0 past H
  int64_t* sbase = reinterpret_cast<int64_t*>(smem + L::kBase);  // [kMaxBases] (by_tile)
  float* sred = reinterpret_cast<float*>(smem + L::kRed);        // [4] the query's max

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

  // by_tile: no tile straddles a page (contiguous keys, or pages of a multiple of kTile keys), so
  // a tile's rows follow from the physical row of its first key, looked up for all of the
  // block's tiles at once before any copy (one page-table read a tile, none on the way), and a
  // tile with all its keys present is one contiguous run of rows. Else each tile's rows are
  // looked up one tile ahead (the first kTile threads, into srow[u % 2]).
  const bool by_tile = n_local <= kMaxBases && (keys.table == nullptr || p.page_size % kTile == 0);
  if (by_tile && threadIdx.x < n_local) {
    const int64_t j0 = tile_start(threadIdx.x);
    int64_t row0 = keys.base + j0;
    if (keys.table != nullptr) {
      const int64_t page = keys.table[j0 / p.page_size];
      row0 = page < 0 ? -1 : page * p.page_size + j0 % p.page_size;
    }
    sbase[threadIdx.x] = row0;
  }
  auto lookup = [&](int64_t u) {
    if (!by_tile && threadIdx.x < kTile && u < n_local) {
      srow[(u & 1) * kTile + threadIdx.x] = DecodeKeyRow(p, keys, tile_start(u) + threadIdx.x);
    }
  };
  // cp.async of local tile u into stage u % kS, zeros for keys past the end or on a missing page;
  // its scales (NaN for a missing page). Always closes a group.
  // kByTile (std::bool_constant) is by_tile, fixed at compile time for the loop's sake.
  auto issue = [&](int64_t u, auto kByTile) {
    if (u < n_local) {
      const int st = static_cast<int>(u % kS);
      auto dst_offset = [](int r, int cc) {
        return r * L::kRowBytes + ((cc ^ RowSwizzle<kDim, kFp8>(r)) << 4);
      };
      if constexpr (decltype(kByTile)::value) {
        CopyDecodeKeyTileFrom<kTile, L::kRowBytes, kThreads, kFp8>(
            p, sbase[u], tile_start(u), keys.len, staging + st * L::kStageBytes,
            sscale + st * kTile, dst_offset);
      } else {
        CopyDecodeKeyTile<kTile, L::kRowBytes, kThreads, kFp8>(p, srow + (u & 1) * kTile,
                                                               staging + st * L::kStageBytes,
                                                               sscale + st * kTile, dst_offset);
      }
    }
    CpAsyncCommit();
  };

  // The first kS - 1 tiles' copies go out before the query is staged, so they arrive meanwhile.
  lookup(0);
  __syncthreads();
#pragma unroll
  for (int u = 0; u < kS - 1; ++u) {
    if (by_tile) {
      issue(u, std::true_type{});
    } else {
      issue(u, std::false_type{});
    }
    lookup(u + 1);
    __syncthreads();
  }

  // The query, permuted along K (see the top), into SW128 slices: logical 16-byte chunk lc of
  // head n holds dims 32 c + 8 t + 4 s + 2 h + {0, 1}, t = 0..3, for lc = 4 c + 2 s + h. Read
  // from global memory once; a thread rereads only its own chunks (no barrier needed for that).
  const uint16_t* q = static_cast<const uint16_t*>(p.q) + i * p.n_heads * kDim;
  auto q_off = [](int idx) {  // chunk idx's SW128 offset
    const int n = idx / (kDim / 8), lc = idx % (kDim / 8);
    return (lc / 8) * L::kQAtom + SwizzledChunk(n, lc % 8);
  };
  // All of a thread's loads are issued before any is used (one round trip, not one a chunk).
  constexpr int kQChunks = kN * (kDim / 8);
  constexpr int kQPer = (kQChunks + kThreads - 1) / kThreads;
  uint32_t qv[kQPer][4];
#pragma unroll
  for (int k = 0; k < kQPer; ++k) {
    const int idx = threadIdx.x + k * kThreads;
    const int n = idx / (kDim / 8), lc = idx % (kDim / 8);
    const int c = lc >> 2, s = (lc >> 1) & 1, h = lc & 1;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      qv[k][t] =
          idx < kQChunks && n < p.n_heads
              ? *reinterpret_cast<const uint32_t*>(q + n * kDim + 32 * c + 8 * t + 4 * s + 2 * h)
              : 0u;
    }
  }
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kQPer; ++k) {
    const int idx = threadIdx.x + k * kThreads;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      amax = fmaxf(amax, fabsf(__uint_as_float(qv[k][t] << 16)));
      amax = fmaxf(amax, fabsf(__uint_as_float(qv[k][t] & 0xFFFF0000u)));
    }
    if (idx < kQChunks) {
      *reinterpret_cast<uint4*>(sq + q_off(idx)) =
          make_uint4(qv[k][0], qv[k][1], qv[k][2], qv[k][3]);
    }
  }
  // e4m3 keys widen to f16 in one instruction (to bf16 in four), so they multiply in f16 when
  // the query, times a power of two 2^e that puts its largest magnitude in [2^13, 2^14), is
  // exactly f16 too (an fp8-quantized query always is, unless its blocks' scales lie 2^28
  // apart); the sums are then scaled back by 2^-e, exactly. Else bf16, as for bf16 keys.
  bool f16 = false;
  float unscale = 1.0f;
  if constexpr (kFp8) {
    amax = WarpMax(amax);
    if (lane == 0) sred[warp] = amax;
    __syncthreads();
    amax = fmaxf(fmaxf(sred[0], sred[1]), fmaxf(sred[2], sred[3]));
    int e2 = 0;
    if (amax > 0.0f && amax <= 3.0e38f) {
      int ex;
      frexpf(amax, &ex);  // amax < 2^ex
      e2 = 14 - ex;
    }
    const float up = ldexpf(1.0f, e2);
    bool exact = true;
    for (int idx = threadIdx.x; idx < kN * (kDim / 8); idx += kThreads) {
      const uint4 v4 = *reinterpret_cast<const uint4*>(sq + q_off(idx));
      const uint32_t v[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        const uint32_t bits = (t & 1) ? (v[t / 2] & 0xFFFF0000u) : (v[t / 2] << 16);
        const float x = __uint_as_float(bits) * up;
        exact = exact && __half2float(__float2half_rn(x)) == x;
      }
    }
    f16 = __syncthreads_and(exact) != 0;
    unscale = ldexpf(1.0f, -e2);
    if (f16) {
      for (int idx = threadIdx.x; idx < kN * (kDim / 8); idx += kThreads) {
        uint4* at = reinterpret_cast<uint4*>(sq + q_off(idx));
        const uint4 v4 = *at;
        const uint32_t v[4] = {v4.x, v4.y, v4.z, v4.w};
        uint32_t hv[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const __half2 hh = __floats2half2_rn(__uint_as_float(v[t] << 16) * up,
                                               __uint_as_float(v[t] & 0xFFFF0000u) * up);
          hv[t] = *reinterpret_cast<const uint32_t*>(&hh);
        }
        *at = make_uint4(hv[0], hv[1], hv[2], hv[3]);
      }
    }
  }
  FenceProxyAsync();  // the query's stores, for wgmma (the loop's first barrier follows)

  for (int h = threadIdx.x; h < kN; h += kThreads) {
    sw8[h] = h < p.n_heads ? p.w[i * p.n_heads + h] : 0.0f;
  }
  float* out = p.out + i * p.out_stride;

  const uint64_t dq = Sw128Desc(sq);
  const int r0 = warp * 16 + g, r1 = r0 + 8;  // this thread's key rows of a tile
  const int sw = RowSwizzle<kDim, kFp8>(r0);  // = RowSwizzle(r1)
  // e4m3 pair -> the A operand's two elements.
  auto widen = [](uint32_t two, auto as_f16) -> uint32_t {
    if constexpr (decltype(as_f16)::value) {
      const __half2_raw h =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
      return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
    } else {
      return E4m3x2ToBf16x2(static_cast<uint16_t>(two));
    }
  };
  auto run = [&](auto as_f16, auto kByTile) {
    constexpr bool kF16 = decltype(as_f16)::value;
    for (int t = 0; t < static_cast<int>(n_local); ++t) {
      CpAsyncWait<kS - 2>();
      __syncthreads();  // tile t has landed; the buffers of tile t - 1 are free
      const int st = static_cast<int>(t % kS);
      const unsigned char* tile = staging + st * L::kStageBytes;
      const unsigned char* row0 = tile + r0 * L::kRowBytes;
      const unsigned char* row1 = tile + r1 * L::kRowBytes;

      // A fragments: step 2 c + s, slots {2 t4, 2 t4 + 1} (a[0] row r0, a[1] row r1) and
      // {8 + 2 t4, 9 + 2 t4} (a[2], a[3]).
      uint32_t a[kSteps][4];
#pragma unroll
      for (int c = 0; c < kDim / 32; ++c) {
        if constexpr (kFp8) {
          const int off = (((2 * c + (t4 >> 1)) ^ sw) << 4) + 8 * (t4 & 1);
          const uint2 v0 = *reinterpret_cast<const uint2*>(row0 + off);
          const uint2 v1 = *reinterpret_cast<const uint2*>(row1 + off);
          a[2 * c][0] = widen(v0.x & 0xFFFFu, as_f16);
          a[2 * c][2] = widen(v0.x >> 16, as_f16);
          a[2 * c + 1][0] = widen(v0.y & 0xFFFFu, as_f16);
          a[2 * c + 1][2] = widen(v0.y >> 16, as_f16);
          a[2 * c][1] = widen(v1.x & 0xFFFFu, as_f16);
          a[2 * c][3] = widen(v1.x >> 16, as_f16);
          a[2 * c + 1][1] = widen(v1.y & 0xFFFFu, as_f16);
          a[2 * c + 1][3] = widen(v1.y >> 16, as_f16);
        } else {
          const int off = ((4 * c + t4) ^ sw) << 4;
          const uint4 v0 = *reinterpret_cast<const uint4*>(row0 + off);
          const uint4 v1 = *reinterpret_cast<const uint4*>(row1 + off);
          a[2 * c][0] = v0.x;
          a[2 * c][2] = v0.y;
          a[2 * c + 1][0] = v0.z;
          a[2 * c + 1][2] = v0.w;
          a[2 * c][1] = v1.x;
          a[2 * c][3] = v1.y;
          a[2 * c + 1][1] = v1.z;
          a[2 * c + 1][3] = v1.w;
        }
      }
#pragma unroll
      for (int k = 0; k < kSteps; ++k) WgmmaFenceOperands(a[k]);

      float d[kN / 2];
#pragma unroll
      for (int e = 0; e < kN / 2; ++e) d[e] = 0.0f;
      WgmmaFenceOperands(d);
      WgmmaFence();
#pragma unroll
      for (int k = 0; k < kSteps; ++k) {
        WgmmaM64NK16RegA<kN, kF16>(d, a[k], DescPlus(dq, (k / 4) * L::kQAtom + (k % 4) * 32),
                                   k > 0);
      }
      WgmmaCommit();
      issue(t + kS - 1, kByTile);  // while the tensor cores work
      if constexpr (!decltype(kByTile)::value) lookup(t + kS);
      WgmmaWait<0>();
      WgmmaFenceOperands(d);

      // ReLU and the head weights; the thread's heads in ascending order, then the quad.
      float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
      for (int j = 0; j < kN / 8; ++j) {
        const float2 w = *reinterpret_cast<const float2*>(sw8 + 8 * j + 2 * t4);
        s0 += w.x * ReluKeepNan(d[4 * j]) + w.y * ReluKeepNan(d[4 * j + 1]);
        s1 += w.x * ReluKeepNan(d[4 * j + 2]) + w.y * ReluKeepNan(d[4 * j + 3]);
      }
      s0 += __shfl_xor_sync(kFullMask, s0, 1);
      s1 += __shfl_xor_sync(kFullMask, s1, 1);
      s0 += __shfl_xor_sync(kFullMask, s0, 2);
      s1 += __shfl_xor_sync(kFullMask, s1, 2);
      if (t4 < 2) {
        const int r = t4 == 0 ? r0 : r1;
        const int64_t j = tile_start(t) + r;
        const float sum = t4 == 0 ? s0 : s1;
        if (j < keys.len) out[j] = sscale[st * kTile + r] * (kF16 ? sum * unscale : sum);
      }
    }
  };
  auto run_by = [&](auto as_f16) {
    if (by_tile) {
      run(as_f16, std::true_type{});
    } else {
      run(as_f16, std::false_type{});
    }
  };
  if constexpr (kFp8) {
    if (f16) {
      run_by(std::true_type{});
    } else {
      run_by(std::false_type{});
    }
  } else {
    run_by(std::false_type{});
  }
  CpAsyncWait<0>();  // no copy outlives the block (the trailing groups are empty)
}

template <int kDim, bool kFp8, int kN, int kStages>
Status LaunchFor(const IndexerLogitsParams& p, unsigned splits, cudaStream_t stream) {
  void (*kernel)(IndexerLogitsParams) = IndexerDecodeWgmmaKernel<kDim, kFp8, kN, kStages>;
  constexpr size_t kBytes = DecodeWgSmem<kDim, kFp8, kN, kStages>::kAlloc;
  NW_RETURN_IF_ERROR(AllowDynamicSharedMemory(reinterpret_cast<const void*>(kernel), kBytes,
                                              "IndexerDecodeWgmmaKernel"));
  kernel<<<dim3(static_cast<unsigned>(p.m), splits), kThreads, kBytes, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("IndexerDecodeWgmmaKernel");
}

template <int kDim, bool kFp8, int kN>
Status LaunchStages(const IndexerLogitsParams& p, unsigned splits, cudaStream_t stream) {
  const int stages = p.decode_stages == 0 ? kDefaultStages<kFp8> : p.decode_stages;
  if (stages == 2) return LaunchFor<kDim, kFp8, kN, 2>(p, splits, stream);
  if (stages == 4) return LaunchFor<kDim, kFp8, kN, 4>(p, splits, stream);
  return LaunchFor<kDim, kFp8, kN, 3>(p, splits, stream);
}

template <int kDim, bool kFp8>
Status LaunchHeads(const IndexerLogitsParams& p, unsigned splits, cudaStream_t stream) {
  if (p.n_heads <= 16) return LaunchStages<kDim, kFp8, 16>(p, splits, stream);
  if (p.n_heads <= 32) return LaunchStages<kDim, kFp8, 32>(p, splits, stream);
  return LaunchStages<kDim, kFp8, 64>(p, splits, stream);
}

}  // namespace

bool WgmmaDecodeIndexerApplies(const IndexerLogitsParams& p) {
  return p.k_format != IndexerKeyFormat::kFp32 && reinterpret_cast<uintptr_t>(p.q) % 4 == 0 &&
         reinterpret_cast<uintptr_t>(p.k) % 16 == 0 &&
         (p.k_scale == nullptr || reinterpret_cast<uintptr_t>(p.k_scale) % 4 == 0);
}

Status LaunchIndexerDecodeWgmma(const IndexerLogitsParams& p, unsigned splits,
                                cudaStream_t stream) {
  const bool fp8 = p.k_format == IndexerKeyFormat::kFp8;
  if (p.head_dim == 128) {
    return fp8 ? LaunchHeads<128, true>(p, splits, stream)
               : LaunchHeads<128, false>(p, splits, stream);
  }
  return fp8 ? LaunchHeads<64, true>(p, splits, stream) : LaunchHeads<64, false>(p, splits, stream);
}

}  // namespace nw::cuda::detail
