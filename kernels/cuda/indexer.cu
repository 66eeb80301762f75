// Indexer logits: launcher and the exact fp32 path (see indexer.h). The exact kernel gives one
// thread a key (for up to 8 queries of a block): the key's values sit in registers and every query
// head is dotted against them in the CPU's association order, the query's heads coming from shared
// memory as broadcasts.
#include <algorithm>
#include <limits>
#include <string>

#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/indexer.h"
#include "kernels/cuda/indexer_impl.cuh"

namespace nw::cuda {
namespace {

using detail::AddRn;
using detail::MulRn;

constexpr int kExactThreads = 128;

/// cpu::Dot: eight interleaved partial sums combined pairwise, products rounded separately.
template <int kDim>
__device__ __forceinline__ float Dot8(const float* q, const float (&k)[kDim]) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < kDim; i += 8) {
    const float4 a = *reinterpret_cast<const float4*>(q + i);
    const float4 b = *reinterpret_cast<const float4*>(q + i + 4);
    s[0] = AddRn(s[0], MulRn(a.x, k[i + 0]));
    s[1] = AddRn(s[1], MulRn(a.y, k[i + 1]));
    s[2] = AddRn(s[2], MulRn(a.z, k[i + 2]));
    s[3] = AddRn(s[3], MulRn(a.w, k[i + 3]));
    s[4] = AddRn(s[4], MulRn(b.x, k[i + 4]));
    s[5] = AddRn(s[5], MulRn(b.y, k[i + 5]));
    s[6] = AddRn(s[6], MulRn(b.z, k[i + 6]));
    s[7] = AddRn(s[7], MulRn(b.w, k[i + 7]));
  }
  return AddRn(AddRn(AddRn(s[0], s[1]), AddRn(s[2], s[3])),
               AddRn(AddRn(s[4], s[5]), AddRn(s[6], s[7])));
}

// kQ consecutive queries per block: a thread's key, loaded into registers once, is dotted with
// every query of the group (keys are read from L2 once per kQ queries instead of once per query).
// The group shares the key mapping when its queries have the same ks (contiguous) or block-table
// row (paged), as a ragged prefill's do; otherwise each query maps its own rows. The arithmetic of
// a (query, key) pair is the same whatever kQ is.
template <int kDim, int kQ>
__global__ void __launch_bounds__(kExactThreads) IndexerExactKernel(IndexerLogitsParams p) {
  extern __shared__ float4 smem4[];
  const int hk = p.n_heads * kDim;
  float* sq = reinterpret_cast<float*>(smem4);  // [kQ, n_heads, kDim]
  float* sw = sq + kQ * hk;                     // [kQ, n_heads]
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kQ;
  const int nq = static_cast<int>(min(static_cast<int64_t>(kQ), p.m - i0));
  __shared__ detail::IndexerKeys keys[kQ];
  __shared__ int64_t s_len_max;
  __shared__ bool s_shared_rows;
  for (int g = 0; g < nq; ++g) detail::FillTail(p, i0 + g, detail::QueryKeys(p, i0 + g).len);
  if (threadIdx.x == 0) {
    int64_t m = 0;
    bool same = true;
    for (int g = 0; g < nq; ++g) {
      keys[g] = detail::QueryKeys(p, i0 + g);
      m = max(m, keys[g].len);
      same = same && keys[g].base == keys[0].base && keys[g].table == keys[0].table;
    }
    s_len_max = m;
    s_shared_rows = same;
  }
  __syncthreads();
  const int64_t len_max = s_len_max;
  const bool shared_rows = s_shared_rows;
  const int64_t tile = kExactThreads;
  if (static_cast<int64_t>(blockIdx.y) * tile >= len_max) return;
  const float* q = static_cast<const float*>(p.q) + i0 * hk;
  for (int t = threadIdx.x; t < nq * hk; t += kExactThreads) sq[t] = q[t];
  for (int t = threadIdx.x; t < nq * p.n_heads; t += kExactThreads) sw[t] = p.w[i0 * p.n_heads + t];
  __syncthreads();
  const float* k = static_cast<const float*>(p.k);
  for (int64_t j0 = static_cast<int64_t>(blockIdx.y) * tile; j0 < len_max;
       j0 += static_cast<int64_t>(gridDim.y) * tile) {
    const int64_t j = j0 + threadIdx.x;
    if (j >= len_max) break;
    float kr[kDim];
    int64_t loaded = -2;  // the row in kr (-2: none yet)
#pragma unroll
    for (int g = 0; g < kQ; ++g) {
      if (g >= nq) break;
      if (j >= keys[g].len) continue;
      float* out = p.out + (i0 + g) * p.out_stride;
      const int64_t row = detail::KeyRow(p, keys[shared_rows ? 0 : g], j);
      if (row < 0) {
        out[j] = quant::QuietNan();
        continue;
      }
      if (row != loaded) {
        const float4* src = reinterpret_cast<const float4*>(k + row * kDim);
#pragma unroll
        for (int c = 0; c < kDim / 4; ++c) {
          const float4 v = src[c];
          kr[4 * c] = v.x;
          kr[4 * c + 1] = v.y;
          kr[4 * c + 2] = v.z;
          kr[4 * c + 3] = v.w;
        }
        loaded = row;
      }
      const float* qg = sq + g * hk;
      const float* wg = sw + g * p.n_heads;
      float s = 0.0f;
      for (int h = 0; h < p.n_heads; ++h) {
        const float d = Dot8<kDim>(qg + h * kDim, kr);
        s = AddRn(s, MulRn(wg[h], d < 0.0f ? 0.0f : d));  // w * std::max(d, 0)
      }
      out[j] = s;
    }
  }
}

template <int kDim, int kQ>
Status LaunchExact(const IndexerLogitsParams& p, unsigned splits, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.m + kQ - 1) / kQ), splits);
  const size_t smem = static_cast<size_t>(kQ) * (p.n_heads * kDim + p.n_heads) * sizeof(float);
  void (*kernel)(IndexerLogitsParams) = IndexerExactKernel<kDim, kQ>;
  NW_RETURN_IF_ERROR(
      AllowDynamicSharedMemory(reinterpret_cast<const void*>(kernel), smem, "IndexerExactKernel"));
  kernel<<<grid, kExactThreads, smem, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("IndexerExactKernel");
}

template <int kDim>
Status LaunchExactFor(const IndexerLogitsParams& p, unsigned splits, cudaStream_t stream) {
  // As many queries per block as fit 48 KiB of shared memory, at most 8.
  const int64_t per_query = static_cast<int64_t>(p.n_heads) * (kDim + 1) * 4;
  if (8 * per_query <= 48 * 1024) return LaunchExact<kDim, 8>(p, splits, stream);
  if (4 * per_query <= 48 * 1024) return LaunchExact<kDim, 4>(p, splits, stream);
  if (2 * per_query <= 48 * 1024) return LaunchExact<kDim, 2>(p, splits, stream);
  return LaunchExact<kDim, 1>(p, splits, stream);
}

}  // namespace

Status LaunchIndexerLogits(const IndexerLogitsParams& params, cudaStream_t stream) {
  IndexerLogitsParams p = params;
  if (p.m < 0 || p.key_rows < 0 || p.out_cols < 0) {
    return Status::InvalidArgument("IndexerLogits: negative size");
  }
  if (p.head_dim != 64 && p.head_dim != 128) {
    return Status::InvalidArgument("IndexerLogits: head_dim must be 64 or 128, got " +
                                   std::to_string(p.head_dim));
  }
  if (p.n_heads < 1 || p.n_heads > 64) {
    return Status::InvalidArgument("IndexerLogits: n_heads must be in [1, 64], got " +
                                   std::to_string(p.n_heads));
  }
  if (p.m == 0 || p.out_cols == 0) return Status::Ok();
  if (p.m > 0x7FFFFFFF) return Status::InvalidArgument("IndexerLogits: more than 2^31 queries");
  if (p.q == nullptr || p.w == nullptr || p.out == nullptr || (p.key_rows > 0 && p.k == nullptr)) {
    return Status::InvalidArgument("IndexerLogits: null pointer");
  }
  const bool paged = p.block_table != nullptr;
  if (paged) {
    if (p.query_row == nullptr || p.lengths == nullptr || p.page_size <= 0 ||
        p.block_table_stride <= 0) {
      return Status::InvalidArgument(
          "IndexerLogits: paged keys need query_row, lengths, page_size > 0 and a block-table "
          "stride");
    }
  } else if (p.ks == nullptr || p.ke == nullptr) {
    return Status::InvalidArgument("IndexerLogits: contiguous keys need ks and ke");
  }
  if (p.decode_tiles_per_block < 0) {
    return Status::InvalidArgument("IndexerLogits: decode_tiles_per_block must be >= 0, got " +
                                   std::to_string(p.decode_tiles_per_block));
  }
  if (p.prefill_key_splits < 0) {
    return Status::InvalidArgument("IndexerLogits: prefill_key_splits must be >= 0, got " +
                                   std::to_string(p.prefill_key_splits));
  }
  if (p.decode_stages != 0 && (p.decode_stages < 2 || p.decode_stages > 4)) {
    return Status::InvalidArgument("IndexerLogits: decode_stages must be 0, 2, 3 or 4, got " +
                                   std::to_string(p.decode_stages));
  }
  if (p.k_format == IndexerKeyFormat::kFp32 && p.k_scale != nullptr) {
    return Status::InvalidArgument("IndexerLogits: fp32 keys take no k_scale");
  }
  if (p.k_format == IndexerKeyFormat::kFp8 && p.k_scale == nullptr) {
    return Status::InvalidArgument("IndexerLogits: fp8 keys need k_scale");
  }
  if (p.out_stride == 0) p.out_stride = p.out_cols;
  if (p.out_stride < p.out_cols) return Status::InvalidArgument("IndexerLogits: out_stride");
  const int64_t max_len = std::min(p.max_len > 0 ? p.max_len : p.out_cols, p.out_cols);

  if (p.k_format != IndexerKeyFormat::kFp32) {
    // Contiguous keys and enough queries to fill a group block (a prefill chunk): the grouped
    // kernel, whose key tiles serve 128 / padded-heads queries at once.
    if (!paged && p.m >= 16) {
      // Hopper wgmma (one key tile by bulk tensor copy serves 512 (query, head) columns).
      if (p.prefill_kernel == IndexerPrefillKernel::kAuto && detail::WgmmaIndexerApplies(p)) {
        return detail::LaunchIndexerWgmma(p, max_len, stream);
      }
      return detail::LaunchIndexerMmaGroup(p, max_len, stream);
    }
    // As many 64-key tiles per block (up to 64 for wgmma, 8 for mma.sync) as still fill the
    // multiprocessors' four block slots: two waves of them for mma.sync, nine tenths of one
    // wave for wgmma. The H200 at V4-Flash shapes: mma.sync ran 8, 16 and 32 within 5 % of
    // each other, 8 fastest with two stages (session 13); wgmma ran 32 a block 10-15 % faster
    // than 8 (session 15), and since session 16 beats mma.sync on bf16 keys too (0.162 against
    // 0.189 ms); once its page-table reads left the loop (session 20), 64 a block (512 blocks
    // for 528 slots) ran e4m3 keys in 0.106 ms against 0.110-0.113 at 32 (bf16 0.146 against
    // 0.148).
    const bool wgmma =
        p.decode_kernel != IndexerDecodeKernel::kMma &&
        (p.decode_kernel == IndexerDecodeKernel::kWgmma || p.k_format != IndexerKeyFormat::kFp32);
    const int64_t tiles = (max_len + 63) / 64;
    const int64_t fill =
        wgmma ? 9 * 4LL * MultiprocessorCount() / 10 : 2 * 4LL * MultiprocessorCount();
    int64_t per = wgmma ? 64 : 8;
    while (per > 1 && p.m * ((tiles + per - 1) / per) < fill) {
      per /= 2;
    }
    if (p.decode_tiles_per_block > 0) per = p.decode_tiles_per_block;
    const unsigned splits =
        static_cast<unsigned>(std::clamp<int64_t>((tiles + per - 1) / per, 1, 65535));
    if ((tiles + splits - 1) / splits > std::numeric_limits<int32_t>::max()) {
      return Status::InvalidArgument("IndexerLogits: " + std::to_string(tiles) +
                                     " key tiles over " + std::to_string(splits) +
                                     " blocks a query: more than 2^31 - 1 a block");
    }
    if (wgmma && detail::WgmmaDecodeIndexerApplies(p)) {
      return detail::LaunchIndexerDecodeWgmma(p, splits, stream);
    }
    return detail::LaunchIndexerMma(p, splits, stream);
  }
  const unsigned splits = static_cast<unsigned>(
      std::clamp<int64_t>((max_len + kExactThreads - 1) / kExactThreads, 1, 65535));
  if (p.head_dim == 128) return LaunchExactFor<128>(p, splits, stream);
  return LaunchExactFor<64>(p, splits, stream);
}

}  // namespace nw::cuda
