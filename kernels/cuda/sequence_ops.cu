// Per-token glue of the V4 forward pass; see sequence_ops.h.
#include <climits>
#include <string>

#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/sequence_ops.h"

namespace nw::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxSel = 2048;

unsigned GridFor(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  const int64_t cap = 32LL * MultiprocessorCount();
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks < cap ? blocks : cap));
}

#define NW_GRID_LOOP(i, total)                                                             \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < (total); \
       i += static_cast<int64_t>(gridDim.x) * kThreads)

__global__ void __launch_bounds__(kThreads) EmbedKernel(EmbedParams p) {
  const int64_t per_token = p.copies * p.dim;
  NW_GRID_LOOP(i, p.tokens * per_token) {
    const int64_t t = i / per_token, c = i % p.dim;
    p.x[i] = p.table[static_cast<int64_t>(p.ids[t]) * p.dim + c];
  }
}

__global__ void __launch_bounds__(kThreads) AddApeKernel(AddApeParams p) {
  NW_GRID_LOOP(i, p.tokens * p.width) {
    const int64_t t = i / p.width, c = i % p.width;
    const int64_t r = (p.first_pos + t) % p.ratio;
    float& s = p.score[t * p.stride + c];
    s = detail::AddRn(s, p.ape[r * p.width + c]);
  }
}

__global__ void __launch_bounds__(kThreads) ScaleKernel(float* x, int64_t n, float scale) {
  NW_GRID_LOOP(i, n) { x[i] = detail::MulRn(x[i], scale); }
}

__device__ __forceinline__ int32_t MapEntry(const AttnIndicesParams& p, int64_t i) {
  if (p.pages == nullptr) return static_cast<int32_t>(i);
  return p.pages[i / p.page_size] * p.page_size + static_cast<int32_t>(i % p.page_size);
}

// One warp per query, for selections of at most kWarpSel entries (the tiny models' top-64): the
// window and kAll lists as AttnIndicesKernel writes them; a selection's sorted order from ranks
// (entry i goes to the number of valid entries below it, ties by position, so a duplicate keeps
// its place as in a stable sort), with no block barrier.
constexpr int kWarpSel = 128;
__global__ void __launch_bounds__(kThreads) AttnIndicesWarpKernel(AttnIndicesParams p) {
  constexpr int kSlots = kWarpSel / 32;
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
       t < p.tokens; t += warps) {
    const int64_t pos = p.first_pos + t;
    const int64_t w0 = pos - p.window + 1 > 0 ? pos - p.window + 1 : 0;
    const int64_t wn = pos - w0 + 1;
    for (int64_t j = lane; j < wn; j += 32) {
      const int64_t q = w0 + j;
      p.win_idx[t * p.window + j] =
          static_cast<int32_t>(q >= p.first_pos ? p.window + (q - p.first_pos) : q % p.window);
    }
    if (lane == 0) p.win_len[t] = static_cast<int32_t>(wn);
    if (p.mode == CompressedMode::kAll) {
      const int64_t visible = (pos + 1) / p.ratio;
      for (int64_t i = lane; i < visible; i += 32)
        p.comp_idx[t * p.comp_stride + i] = MapEntry(p, i);
      if (lane == 0) p.comp_len[t] = static_cast<int32_t>(visible);
    } else if (p.mode == CompressedMode::kSelected) {
      int32_t key[kSlots];
      int rank[kSlots];
      int count = 0;
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        const int i = lane + 32 * s;
        key[s] = i < p.sel_width ? p.sel[t * p.sel_width + i] : -1;
        rank[s] = 0;
        count += __popc(__ballot_sync(detail::kFullMask, key[s] >= 0));
      }
#pragma unroll
      for (int s2 = 0; s2 < kSlots; ++s2) {
        if (32 * s2 >= p.sel_width) break;  // the same for every lane
        for (int l = 0; l < 32; ++l) {
          const int32_t other = __shfl_sync(detail::kFullMask, key[s2], l);
          const int other_i = 32 * s2 + l;
#pragma unroll
          for (int s = 0; s < kSlots; ++s) {
            const int i = lane + 32 * s;
            rank[s] += other >= 0 && (other < key[s] || (other == key[s] && other_i < i)) ? 1 : 0;
          }
        }
      }
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        if (key[s] >= 0) p.comp_idx[t * p.comp_stride + rank[s]] = MapEntry(p, key[s]);
      }
      if (lane == 0) p.comp_len[t] = count;
    } else if (lane == 0 && p.comp_len != nullptr) {
      p.comp_len[t] = 0;
    }
  }
}

// One block per query (selections wider than kWarpSel).
__global__ void __launch_bounds__(kThreads) AttnIndicesKernel(AttnIndicesParams p) {
  __shared__ int32_t keys[kMaxSel];
  for (int64_t t = blockIdx.x; t < p.tokens; t += gridDim.x) {
    const int64_t pos = p.first_pos + t;
    const int64_t w0 = pos - p.window + 1 > 0 ? pos - p.window + 1 : 0;
    const int64_t wn = pos - w0 + 1;
    for (int64_t j = threadIdx.x; j < wn; j += kThreads) {
      const int64_t q = w0 + j;
      p.win_idx[t * p.window + j] =
          static_cast<int32_t>(q >= p.first_pos ? p.window + (q - p.first_pos) : q % p.window);
    }
    if (threadIdx.x == 0) p.win_len[t] = static_cast<int32_t>(wn);
    if (p.mode == CompressedMode::kAll) {
      const int64_t visible = (pos + 1) / p.ratio;
      for (int64_t i = threadIdx.x; i < visible; i += kThreads)
        p.comp_idx[t * p.comp_stride + i] = MapEntry(p, i);
      if (threadIdx.x == 0) p.comp_len[t] = static_cast<int32_t>(visible);
    } else if (p.mode == CompressedMode::kSelected) {
      int size = 1;
      while (size < p.sel_width) size <<= 1;
      for (int i = threadIdx.x; i < size; i += kThreads) {
        const int32_t v = i < p.sel_width ? p.sel[t * p.sel_width + i] : -1;
        keys[i] = v < 0 ? INT_MAX : v;
      }
      __syncthreads();
      for (int k = 2; k <= size; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
          for (int i = threadIdx.x; i < size; i += kThreads) {
            const int partner = i ^ j;
            if (partner > i) {
              const bool up = (i & k) == 0;
              const int32_t a = keys[i], b = keys[partner];
              if ((a > b) == up) {
                keys[i] = b;
                keys[partner] = a;
              }
            }
          }
          __syncthreads();
        }
      }
      int32_t count = 0;
      for (int i = 0; i < p.sel_width; ++i) count += keys[i] != INT_MAX ? 1 : 0;
      for (int i = threadIdx.x; i < count; i += kThreads)
        p.comp_idx[t * p.comp_stride + i] = MapEntry(p, keys[i]);
      if (threadIdx.x == 0) p.comp_len[t] = count;
      __syncthreads();  // keys are rewritten by the next query
    } else if (threadIdx.x == 0 && p.comp_len != nullptr) {
      p.comp_len[t] = 0;
    }
  }
}

__global__ void __launch_bounds__(kThreads) RingUpdateKernel(RingUpdateParams p) {
  const int64_t end = p.first_pos + p.tokens;
  const int64_t q0 = end - p.window > p.first_pos ? end - p.window : p.first_pos;
  NW_GRID_LOOP(i, (end - q0) * p.dim) {
    const int64_t q = q0 + i / p.dim, c = i % p.dim;
    p.ring[(q % p.window) * p.dim + c] = p.chunk[(q - p.first_pos) * p.dim + c];
  }
}

__global__ void __launch_bounds__(kThreads) StoreRowsKernel(StoreRowsParams p) {
  NW_GRID_LOOP(i, p.n * p.dim) {
    const int64_t r = i / p.dim, c = i % p.dim;
    const int64_t e = p.first_entry + r;
    const int64_t row =
        p.pages == nullptr
            ? e
            : static_cast<int64_t>(p.pages[e / p.page_size]) * p.page_size + e % p.page_size;
    const float v = p.src[i];
    p.dst[row * p.dim + c] = v;
    if (p.dst_bf16 != nullptr) p.dst_bf16[row * p.dim + c] = quant::FloatToBf16Bits(v);
  }
}

// cpu::RanksBefore: numbers before NaN, larger first, ties to the lower index.
__device__ __forceinline__ bool RanksBefore(float sa, int64_t a, float sb, int64_t b) {
  const bool na = sa != sa, nb = sb != sb;
  if (na != nb) return nb;
  if (!na && sa != sb) return sa > sb;
  return a < b;
}

__device__ __forceinline__ int64_t BlockSumInt(int64_t v, int64_t* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(detail::kFullMask, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = v;
  __syncthreads();
  int64_t total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += shared[w];
  return total;
}

// One block per probed row.
__global__ void __launch_bounds__(kThreads) ProbeKernel(ProbeParams p) {
  __shared__ int64_t red[kThreads / 32];
  __shared__ float nx_val[kThreads];
  __shared__ int64_t nx_idx[kThreads];
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const float* s = p.scores + r * p.score_stride;
    const int64_t visible = p.visible[r];
    const int64_t selectable = visible - p.key_begin > 0 ? visible - p.key_begin : 0;
    const int n_sel = static_cast<int>(selectable < p.k ? selectable : p.k);
    const int32_t* sel = p.topk + r * p.k;
    int64_t best = -1;
    float best_score = quant::QuietNan();
    bool hit = false;
    if (p.needle_end > p.needle_begin && visible > 0) {
      const int64_t lo0 = p.needle_begin / p.ratio - 1;
      const int64_t lo = lo0 > 0 ? lo0 : 0;
      const int64_t hi0 = (p.needle_end - 1) / p.ratio + 1;
      const int64_t hi = hi0 < visible - 1 ? hi0 : visible - 1;
      for (int64_t i = lo; i <= hi; ++i) {
        const int64_t first = p.ratio * (i - 1), last = p.ratio * (i + 1) - 1;
        if (last < p.needle_begin || first >= p.needle_end) continue;
        const float si = s[i];
        int64_t before = 0;
        for (int64_t j = threadIdx.x; j < visible; j += kThreads)
          before += RanksBefore(s[j], j, si, i) ? 1 : 0;
        const int64_t rank = BlockSumInt(before, red);
        if (best < 0 || rank < best) {
          best = rank;
          best_score = si;
        }
        for (int j = 0; j < n_sel; ++j) hit = hit || sel[j] == i;
      }
    }
    // The best entry left out of the selection.
    float nv = 0.0f;
    int64_t ni = -1;
    if (visible > n_sel) {
      for (int64_t j = threadIdx.x; j < visible; j += kThreads) {
        bool chosen = false;
        for (int q = 0; q < n_sel && !chosen; ++q) chosen = sel[q] == j;
        if (!chosen && (ni < 0 || RanksBefore(s[j], j, nv, ni))) {
          nv = s[j];
          ni = j;
        }
      }
    }
    __syncthreads();
    nx_val[threadIdx.x] = nv;
    nx_idx[threadIdx.x] = ni;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int t = 1; t < kThreads; ++t) {
        if (nx_idx[t] >= 0 && (ni < 0 || RanksBefore(nx_val[t], nx_idx[t], nv, ni))) {
          nv = nx_val[t];
          ni = nx_idx[t];
        }
      }
      p.next_score[r] = ni >= 0 ? nv : quant::QuietNan();
      p.needle_rank[r] = static_cast<int32_t>(best);
      p.in_topk[r] = hit ? 1 : 0;
      p.needle_score[r] = best_score;
      p.kth_score[r] = (n_sel == p.k && p.k > 0) ? s[sel[p.k - 1]] : quant::QuietNan();
    }
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kThreads)
    MaskKeyPrefixKernel(float* scores, int64_t rows, int64_t stride, int64_t n) {
  NW_GRID_LOOP(i, rows * n) {
    scores[(i / n) * stride + i % n] = quant::FloatFromBits(0xFF800000u);
  }
}

__global__ void __launch_bounds__(kThreads)
    DropSelectedBelowKernel(int32_t* sel, int64_t total, int64_t begin) {
  NW_GRID_LOOP(i, total) {
    if (sel[i] < begin) sel[i] = -1;
  }
}

}  // namespace

Status LaunchMaskKeyPrefix(float* scores, int64_t rows, int64_t stride, int64_t cols, int64_t begin,
                           cudaStream_t stream) {
  if (rows < 0 || cols < 0 || stride < cols || begin < 0) {
    return Status::InvalidArgument("MaskKeyPrefix: sizes");
  }
  const int64_t n = begin < cols ? begin : cols;
  if (rows == 0 || n == 0) return Status::Ok();
  if (scores == nullptr) return Status::InvalidArgument("MaskKeyPrefix: null pointer");
  MaskKeyPrefixKernel<<<GridFor(rows * n), kThreads, 0, stream>>>(scores, rows, stride, n);
  return NW_CUDA_LAUNCH_STATUS("MaskKeyPrefixKernel");
}

Status LaunchDropSelectedBelow(int32_t* sel, int64_t rows, int k, int64_t begin,
                               cudaStream_t stream) {
  if (rows < 0 || k < 0 || begin < 0) return Status::InvalidArgument("DropSelectedBelow: sizes");
  if (rows == 0 || k == 0 || begin == 0) return Status::Ok();
  if (sel == nullptr) return Status::InvalidArgument("DropSelectedBelow: null pointer");
  DropSelectedBelowKernel<<<GridFor(rows * k), kThreads, 0, stream>>>(sel, rows * k, begin);
  return NW_CUDA_LAUNCH_STATUS("DropSelectedBelowKernel");
}

Status LaunchEmbed(const EmbedParams& p, cudaStream_t stream) {
  if (p.tokens < 0 || p.dim <= 0 || p.copies < 1) return Status::InvalidArgument("Embed: sizes");
  if (p.tokens == 0) return Status::Ok();
  if (p.table == nullptr || p.ids == nullptr || p.x == nullptr) {
    return Status::InvalidArgument("Embed: null pointer");
  }
  EmbedKernel<<<GridFor(p.tokens * p.copies * p.dim), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("EmbedKernel");
}

Status LaunchAddApe(const AddApeParams& params, cudaStream_t stream) {
  AddApeParams p = params;
  if (p.tokens < 0 || p.width <= 0 || p.ratio <= 0 || p.first_pos < 0) {
    return Status::InvalidArgument("AddApe: sizes");
  }
  if (p.tokens == 0) return Status::Ok();
  if (p.score == nullptr || p.ape == nullptr) return Status::InvalidArgument("AddApe: null");
  if (p.stride == 0) p.stride = p.width;
  AddApeKernel<<<GridFor(p.tokens * p.width), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("AddApeKernel");
}

Status LaunchScale(float* x, int64_t n, float scale, cudaStream_t stream) {
  if (n < 0) return Status::InvalidArgument("Scale: negative n");
  if (n == 0) return Status::Ok();
  if (x == nullptr) return Status::InvalidArgument("Scale: null pointer");
  ScaleKernel<<<GridFor(n), kThreads, 0, stream>>>(x, n, scale);
  return NW_CUDA_LAUNCH_STATUS("ScaleKernel");
}

Status LaunchAttnIndices(const AttnIndicesParams& p, cudaStream_t stream) {
  if (p.tokens < 0 || p.window < 1 || p.first_pos < 0) {
    return Status::InvalidArgument("AttnIndices: tokens >= 0, window >= 1 required");
  }
  if (p.tokens == 0) return Status::Ok();
  if (p.win_idx == nullptr || p.win_len == nullptr) {
    return Status::InvalidArgument("AttnIndices: null window lists");
  }
  if (p.mode != CompressedMode::kNone) {
    if (p.comp_idx == nullptr || p.comp_len == nullptr || p.ratio <= 0 || p.page_size <= 0) {
      return Status::InvalidArgument("AttnIndices: compressed lists need buffers and a ratio");
    }
    if (p.mode == CompressedMode::kSelected &&
        (p.sel == nullptr || p.sel_width < 0 || p.sel_width > kMaxSel ||
         p.comp_stride < p.sel_width)) {
      return Status::InvalidArgument("AttnIndices: selected lists need sel and a width <= 2048");
    }
    if (p.mode == CompressedMode::kAll && p.comp_stride < (p.first_pos + p.tokens) / p.ratio) {
      return Status::InvalidArgument("AttnIndices: comp_stride below the visible entries");
    }
  }
  if (p.mode != CompressedMode::kSelected || p.sel_width <= kWarpSel) {
    AttnIndicesWarpKernel<<<GridFor(p.tokens * 32), kThreads, 0, stream>>>(p);
    return NW_CUDA_LAUNCH_STATUS("AttnIndicesWarpKernel");
  }
  const unsigned blocks = static_cast<unsigned>(p.tokens < 65535 * 8 ? p.tokens : 65535 * 8);
  AttnIndicesKernel<<<blocks, kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("AttnIndicesKernel");
}

Status LaunchRingUpdate(const RingUpdateParams& p, cudaStream_t stream) {
  if (p.tokens < 0 || p.window < 1 || p.dim <= 0 || p.first_pos < 0) {
    return Status::InvalidArgument("RingUpdate: sizes");
  }
  if (p.tokens == 0) return Status::Ok();
  if (p.ring == nullptr || p.chunk == nullptr) return Status::InvalidArgument("RingUpdate: null");
  RingUpdateKernel<<<GridFor(p.window * p.dim), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("RingUpdateKernel");
}

Status LaunchStoreRows(const StoreRowsParams& p, cudaStream_t stream) {
  if (p.n < 0 || p.dim <= 0 || p.first_entry < 0 || p.page_size <= 0) {
    return Status::InvalidArgument("StoreRows: sizes");
  }
  if (p.n == 0) return Status::Ok();
  if (p.src == nullptr || p.dst == nullptr) return Status::InvalidArgument("StoreRows: null");
  StoreRowsKernel<<<GridFor(p.n * p.dim), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("StoreRowsKernel");
}

Status LaunchProbe(const ProbeParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.k < 0 || p.ratio <= 0) return Status::InvalidArgument("Probe: sizes");
  if (p.rows == 0) return Status::Ok();
  if (p.scores == nullptr || p.topk == nullptr || p.visible == nullptr ||
      p.needle_rank == nullptr || p.in_topk == nullptr || p.needle_score == nullptr ||
      p.kth_score == nullptr || p.next_score == nullptr) {
    return Status::InvalidArgument("Probe: null pointer");
  }
  const unsigned blocks = static_cast<unsigned>(p.rows < 65535 * 8 ? p.rows : 65535 * 8);
  ProbeKernel<<<blocks, kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("ProbeKernel");
}

}  // namespace nw::cuda
