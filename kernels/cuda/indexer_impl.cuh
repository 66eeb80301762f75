// Internals shared by the indexer kernels (indexer.cu, indexer_mma.cu). Device code.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/indexer.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/quant/scalar.h"

namespace nw::cuda::detail {

/// Where query i's keys live: len keys; contiguous rows start at `base`, paged rows go through
/// `table` (the query's block-table row).
struct IndexerKeys {
  int64_t len;
  int64_t base;
  const int32_t* table;
};

__device__ __forceinline__ IndexerKeys QueryKeys(const IndexerLogitsParams& p, int64_t i) {
  IndexerKeys r;
  if (p.block_table == nullptr) {
    const int64_t ks = max(static_cast<int64_t>(p.ks[i]), int64_t{0});
    const int64_t ke = min(static_cast<int64_t>(p.ke[i]), p.key_rows);
    r.len = max(ke - ks, int64_t{0});
    r.base = ks;
    r.table = nullptr;
  } else {
    r.len = min(static_cast<int64_t>(p.lengths[i]), p.block_table_stride * p.page_size);
    r.len = max(r.len, int64_t{0});
    r.base = 0;
    r.table = p.block_table + static_cast<int64_t>(p.query_row[i]) * p.block_table_stride;
  }
  r.len = min(r.len, p.out_cols);
  return r;
}

/// Physical row of logical key j, or -1 when its page lies outside the key buffer.
__device__ __forceinline__ int64_t KeyRow(const IndexerLogitsParams& p, const IndexerKeys& q,
                                          int64_t j) {
  if (q.table == nullptr) return q.base + j;
  const int64_t page = q.table[j / p.page_size];
  const int64_t row = page * p.page_size + j % p.page_size;
  return (page < 0 || row >= p.key_rows) ? -1 : row;
}

/// Physical row of logical key j (KeyRow) with 32-bit division when j and the page size allow,
/// -2 past the query's keys.
__device__ __forceinline__ int64_t DecodeKeyRow(const IndexerLogitsParams& p,
                                                const IndexerKeys& keys, int64_t j) {
  if (j >= keys.len) return -2;
  if (keys.table == nullptr) return keys.base + j;
  if (j > 0x7FFFFFFF) return KeyRow(p, keys, j);
  const uint32_t ps = static_cast<uint32_t>(p.page_size);
  const uint32_t jj = static_cast<uint32_t>(j);
  const uint32_t pg = jj / ps;
  const int64_t page = keys.table[pg];
  const int64_t row = page * p.page_size + (jj - pg * ps);
  return (page < 0 || row >= p.key_rows) ? -1 : row;
}

/// cp.async of one decode key tile: kTile rows of kRowBytes (physical rows `rows`, -1 for a
/// missing page, -2 past the query's keys) into `dst`, row r's 16-byte chunk cc at
/// dst + dst_offset(r, cc), zeros for rows < 0; the rows' scales into `scales` (1 without
/// k_scale, NaN for a missing page). Does not close the group. Block-wide (kThreads threads).
/// kUnrolled issues a thread's copies from an unrolled loop, else from a rolled one (the H200
/// ran the wgmma decode kernel's e4m3 tiles faster unrolled and its bf16 tiles faster rolled:
/// docs/throughput.md, session 16).
template <int kTile, int kRowBytes, int kThreads, bool kUnrolled, typename DstOffset>
__device__ __forceinline__ void CopyDecodeKeyTile(const IndexerLogitsParams& p, const int64_t* rows,
                                                  unsigned char* dst, float* scales,
                                                  DstOffset dst_offset) {
  constexpr int kChunks = kRowBytes / 16;
  constexpr int kPerThread = kTile * kChunks / kThreads;
  static_assert(kTile * kChunks % kThreads == 0);
#pragma unroll(kUnrolled ? kPerThread : 1)
  for (int k = 0; k < kPerThread; ++k) {
    const int c = threadIdx.x + k * kThreads;
    const int r = c / kChunks, cc = c % kChunks;
    const int64_t row = rows[r];
    unsigned char* d = dst + dst_offset(r, cc);
    if (row >= 0) {
      CpAsync16(d, static_cast<const unsigned char*>(p.k) + row * kRowBytes + cc * 16, true);
    } else {
      *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
    }
  }
  if (threadIdx.x < kTile) {
    const int64_t row = rows[threadIdx.x];
    float* s = scales + threadIdx.x;
    if (row >= 0 && p.k_scale != nullptr) {
      CpAsync4(s, p.k_scale + row);
    } else {
      *s = row == -1 ? quant::QuietNan() : 1.0f;
    }
  }
}

/// CopyDecodeKeyTile for a tile that lies within one page: its keys j0 .. j0 + kTile - 1 (those
/// below len present) are physical rows row0 .. row0 + kTile - 1, or on a missing page when
/// row0 < 0. The same rows, zeros and scales as CopyDecodeKeyTile with DecodeKeyRow's rows; a
/// tile with all its keys present and in the buffer is copied as one contiguous run, without a
/// per-row lookup. Does not close the group. Block-wide (kThreads threads).
template <int kTile, int kRowBytes, int kThreads, bool kUnrolled, typename DstOffset>
__device__ __forceinline__ void CopyDecodeKeyTileFrom(const IndexerLogitsParams& p, int64_t row0,
                                                      int64_t j0, int64_t len, unsigned char* dst,
                                                      float* scales, DstOffset dst_offset) {
  constexpr int kChunks = kRowBytes / 16;
  constexpr int kPerThread = kTile * kChunks / kThreads;
  static_assert(kTile * kChunks % kThreads == 0);
  auto row_of = [&](int r) -> int64_t {
    if (j0 + r >= len) return -2;
    return row0 < 0 || row0 + r >= p.key_rows ? -1 : row0 + r;
  };
  if (row0 >= 0 && j0 + kTile <= len && row0 + kTile <= p.key_rows) {
    const unsigned char* src = static_cast<const unsigned char*>(p.k) + row0 * kRowBytes;
#pragma unroll(kUnrolled ? kPerThread : 1)
    for (int k = 0; k < kPerThread; ++k) {
      const int c = threadIdx.x + k * kThreads;
      CpAsync16(dst + dst_offset(c / kChunks, c % kChunks), src + c * 16, true);
    }
    if (threadIdx.x < kTile) {
      if (p.k_scale != nullptr) {
        CpAsync4(scales + threadIdx.x, p.k_scale + row0 + threadIdx.x);
      } else {
        scales[threadIdx.x] = 1.0f;
      }
    }
    return;
  }
#pragma unroll(kUnrolled ? kPerThread : 1)
  for (int k = 0; k < kPerThread; ++k) {
    const int c = threadIdx.x + k * kThreads;
    const int r = c / kChunks, cc = c % kChunks;
    const int64_t row = row_of(r);
    unsigned char* d = dst + dst_offset(r, cc);
    if (row >= 0) {
      CpAsync16(d, static_cast<const unsigned char*>(p.k) + row * kRowBytes + cc * 16, true);
    } else {
      *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
    }
  }
  if (threadIdx.x < kTile) {
    const int64_t row = row_of(threadIdx.x);
    float* s = scales + threadIdx.x;
    if (row >= 0 && p.k_scale != nullptr) {
      CpAsync4(s, p.k_scale + row);
    } else {
      *s = row == -1 ? quant::QuietNan() : 1.0f;
    }
  }
}

/// -inf into out[i, j] for len <= j < out_cols, this block's share (by blockIdx.y).
__device__ __forceinline__ void FillTail(const IndexerLogitsParams& p, int64_t i, int64_t len) {
  float* out = p.out + i * p.out_stride;
  for (int64_t j = len + static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
       j < p.out_cols; j += static_cast<int64_t>(gridDim.y) * blockDim.x) {
    out[j] = -INFINITY;
  }
}

/// One level of a reduce-scatter over a lane bit (`offset` = 1 << bit): a lane keeps half of its
/// kN values (the upper half where that bit is set), adds its partner's copy of that half and
/// sends the other half, leaving the sums in w[0..kHalf).
template <int kHalf, int kN>
__device__ __forceinline__ void ReduceScatterLevel(float (&w)[kN], bool upper, int offset) {
#pragma unroll
  for (int m = 0; m < kHalf; ++m) {
    const float keep = upper ? w[m + kHalf] : w[m], send = upper ? w[m] : w[m + kHalf];
    w[m] = keep + __shfl_xor_sync(kFullMask, send, offset);
  }
}
/// Tensor-core launch (indexer_mma.cu); params already validated.
Status LaunchIndexerMma(const IndexerLogitsParams& p, unsigned splits, cudaStream_t stream);
/// Tensor cores, many queries per block (contiguous keys only); params already validated.
Status LaunchIndexerMmaGroup(const IndexerLogitsParams& p, int64_t max_len, cudaStream_t stream);
/// Whether the wgmma kernel takes these (validated, contiguous) params: bf16 keys, q and k
/// 16-byte aligned, 1 <= key_rows < 2^31.
bool WgmmaIndexerApplies(const IndexerLogitsParams& p);
/// Hopper wgmma, many queries per block (indexer_wgmma.cu); WgmmaIndexerApplies(p) holds.
Status LaunchIndexerWgmma(const IndexerLogitsParams& p, int64_t max_len, cudaStream_t stream);
/// Whether the wgmma decode kernel takes these (validated) params: bf16 or e4m3 keys, k 16-byte,
/// q and k_scale 4-byte aligned.
bool WgmmaDecodeIndexerApplies(const IndexerLogitsParams& p);
/// Hopper wgmma, one query per block over `splits` blocks (indexer_decode_wgmma.cu);
/// WgmmaDecodeIndexerApplies(p) holds.
Status LaunchIndexerDecodeWgmma(const IndexerLogitsParams& p, unsigned splits, cudaStream_t stream);

}  // namespace nw::cuda::detail
