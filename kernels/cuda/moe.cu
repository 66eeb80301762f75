// MoE routing, dispatch, SwiGLU and combination; see moe.h.
#include <string>

#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/moe.h"
#include "kernels/quant/scalar.h"

namespace nw::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxDispatchExperts =
    12 * 1024;  // the count/cursor arrays in 48 KiB of shared memory

__device__ __forceinline__ float ExpF(float x) {
  return static_cast<float>(exp(static_cast<double>(x)));
}

unsigned GridFor(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  const int64_t cap = 32LL * MultiprocessorCount();
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks < cap ? blocks : cap));
}

// True when (va, a) ranks before (vb, b): larger first, ties to the lower index.
__device__ __forceinline__ bool Before(float va, int a, float vb, int b) {
  return va > vb || (va == vb && a < b);
}

__global__ void __launch_bounds__(kThreads) MoeRouteKernel(MoeRouteParams p) {
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; t < p.tokens;
       t += static_cast<int64_t>(gridDim.x) * kThreads) {
    float* s = p.logits + t * p.n_experts;
    const int E = p.n_experts;
    switch (p.score_func) {
      case MoeScoreFunc::kSoftmax: {
        float mx = s[0];
        for (int e = 1; e < E; ++e) mx = fmaxf(mx, s[e]);
        float sum = 0.0f;
        for (int e = 0; e < E; ++e) {
          s[e] = ExpF(detail::SubRn(s[e], mx));
          sum = detail::AddRn(sum, s[e]);
        }
        for (int e = 0; e < E; ++e) s[e] = s[e] / sum;
        break;
      }
      case MoeScoreFunc::kSigmoid:
        for (int e = 0; e < E; ++e) s[e] = 1.0f / detail::AddRn(1.0f, ExpF(-s[e]));
        break;
      case MoeScoreFunc::kSqrtSoftplus:
        for (int e = 0; e < E; ++e) {
          const float v = s[e];
          const float sp = v > 20.0f ? v : static_cast<float>(log1p(static_cast<double>(ExpF(v))));
          s[e] = sqrtf(sp);
        }
        break;
    }
    int32_t* ex = p.experts + t * p.k;
    float* wt = p.weights + t * p.k;
    if (p.tid2eid != nullptr) {
      const int64_t row = static_cast<int64_t>(p.token_ids[t]) * p.k;
      for (int j = 0; j < p.k; ++j) ex[j] = p.tid2eid[row + j];
    } else {
      // Successive maxima of scores + bias below the previous pick (no selection flags needed).
      float prev_v = 0.0f;
      int prev_i = -1;
      for (int j = 0; j < p.k; ++j) {
        float best_v = 0.0f;
        int best_i = -1;
        for (int e = 0; e < E; ++e) {
          const float v = p.bias != nullptr ? detail::AddRn(s[e], p.bias[e]) : s[e];
          if (prev_i >= 0 && !Before(prev_v, prev_i, v, e)) continue;
          if (best_i < 0 || Before(v, e, best_v, best_i)) {
            best_v = v;
            best_i = e;
          }
        }
        ex[j] = best_i;
        prev_v = best_v;
        prev_i = best_i;
      }
    }
    for (int j = 0; j < p.k; ++j) wt[j] = s[ex[j]];
    if (p.score_func != MoeScoreFunc::kSoftmax) {
      float sum = 0.0f;
      for (int j = 0; j < p.k; ++j) sum = detail::AddRn(sum, wt[j]);
      for (int j = 0; j < p.k; ++j) wt[j] = wt[j] / sum;
    }
    for (int j = 0; j < p.k; ++j) wt[j] = detail::MulRn(wt[j], p.route_scale);
    // Stable insertion sort of the k slots by expert id.
    for (int j = 1; j < p.k; ++j) {
      const int32_t e = ex[j];
      const float w = wt[j];
      int i = j - 1;
      while (i >= 0 && ex[i] > e) {
        ex[i + 1] = ex[i];
        wt[i + 1] = wt[i];
        --i;
      }
      ex[i + 1] = e;
      wt[i + 1] = w;
    }
  }
}

// Dispatch in three passes over chunks of kMoeDispatchChunk slots, one warp per chunk:
//   count  per chunk and expert, the slots routed there (warp match groups equal experts);
//   scan   one block: per expert the exclusive prefix over chunks (in place), the offsets and
//          the tile list;
//   place  per chunk, each slot's list index = offsets[e] + earlier chunks' count + the slots of
//          e before it in this chunk (rank within its match group, then the group's leader moves
//          the chunk's cursor): ascending slot order within each expert, no atomics.
__device__ __forceinline__ int DispatchExpert(const MoeDispatchParams& p, int64_t s, int64_t end) {
  if (s >= end) return -1;
  const int e = p.experts[s];
  return e >= 0 && e < p.n_experts ? e : -1;
}

// A chunk's slots walked 32 at a time by one warp; every round's expert is loaded up front (all
// loads in flight at once: one at a time, each round waited a memory latency). Rounds past the
// chunk's end see -1, which neither counts nor places.
constexpr int kChunkRounds = static_cast<int>(kMoeDispatchChunk / 32);
__device__ __forceinline__ void LoadChunkExperts(const MoeDispatchParams& p, int64_t s0, int64_t s1,
                                                 int (&ex)[kChunkRounds]) {
#pragma unroll
  for (int i = 0; i < kChunkRounds; ++i) {
    ex[i] = DispatchExpert(p, s0 + i * 32 + static_cast<int>(threadIdx.x), s1);
  }
}

__global__ void __launch_bounds__(32) MoeDispatchCountKernel(MoeDispatchParams p) {
  extern __shared__ int32_t count[];
  const int lane = threadIdx.x;
  const int64_t c = blockIdx.x;
  for (int e = lane; e < p.n_experts; e += 32) count[e] = 0;
  __syncwarp();
  const int64_t s0 = c * kMoeDispatchChunk;
  const int64_t s1 = min(p.tokens * p.k, s0 + kMoeDispatchChunk);
  int ex[kChunkRounds];
  LoadChunkExperts(p, s0, s1, ex);
#pragma unroll
  for (int i = 0; i < kChunkRounds; ++i) {
    const int e = ex[i];
    const unsigned peers = __match_any_sync(0xFFFFFFFFu, e);
    if (e >= 0 && (peers & ((1u << lane) - 1u)) == 0) count[e] += __popc(peers);
    __syncwarp();
  }
  for (int e = lane; e < p.n_experts; e += 32) {
    p.chunk_counts[c * p.n_experts + e] = count[e];
  }
}

__global__ void __launch_bounds__(1024) MoeDispatchScanKernel(MoeDispatchParams p, int64_t chunks) {
  __shared__ int64_t total_tiles;
  const int E = p.n_experts;
  int32_t* totals = p.chunk_counts + chunks * E;  // per expert: count, then first tile
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t run = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const int32_t v = p.chunk_counts[c * E + e];
      p.chunk_counts[c * E + e] = run;
      run += v;
    }
    totals[e] = run;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    p.offsets[0] = 0;
    int64_t tile = 0;
    for (int e = 0; e < E; ++e) {
      const int32_t n = totals[e];
      p.offsets[e + 1] = p.offsets[e] + n;
      totals[e] = static_cast<int32_t>(tile);
      tile += (n + p.tile_rows_max - 1) / p.tile_rows_max;
    }
    total_tiles = tile;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int64_t tile = totals[e];
    for (int32_t r = p.offsets[e]; r < p.offsets[e + 1]; r += p.tile_rows_max, ++tile) {
      if (tile >= p.max_tiles) break;
      p.tile_expert[tile] = e;
      p.tile_row0[tile] = r;
      p.tile_rows[tile] = min(p.tile_rows_max, p.offsets[e + 1] - r);
    }
  }
  for (int64_t tile = total_tiles + threadIdx.x; tile < p.max_tiles; tile += blockDim.x) {
    p.tile_expert[tile] = -1;
    p.tile_row0[tile] = 0;
    p.tile_rows[tile] = 0;
  }
}

__global__ void __launch_bounds__(32) MoeDispatchPlaceKernel(MoeDispatchParams p) {
  extern __shared__ int32_t cursor[];
  const int lane = threadIdx.x;
  const int64_t c = blockIdx.x;
  for (int e = lane; e < p.n_experts; e += 32) {
    cursor[e] = p.offsets[e] + p.chunk_counts[c * p.n_experts + e];
  }
  __syncwarp();
  const int64_t s0 = c * kMoeDispatchChunk;
  const int64_t s1 = min(p.tokens * p.k, s0 + kMoeDispatchChunk);
  int ex[kChunkRounds];
  LoadChunkExperts(p, s0, s1, ex);
#pragma unroll
  for (int i = 0; i < kChunkRounds; ++i) {
    const int64_t s = s0 + i * 32 + lane;
    const int e = ex[i];
    const unsigned peers = __match_any_sync(0xFFFFFFFFu, e);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    if (e >= 0) {
      const int32_t at = cursor[e] + rank;
      p.list_token[at] = static_cast<int32_t>(s / p.k);
      p.position[s] = at;
    }
    __syncwarp();
    if (e >= 0 && rank == 0) cursor[e] += __popc(peers);
    __syncwarp();
  }
}

__global__ void __launch_bounds__(kThreads) SwiGluKernel(SwiGluParams p) {
  const int64_t total = p.rows * p.inter;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    float g = p.gate[i];
    float u = p.up[i];
    if (p.limit > 0.0f) {
      u = fminf(fmaxf(u, -p.limit), p.limit);
      g = fminf(g, p.limit);
    }
    const float silu = g / detail::AddRn(1.0f, ExpF(-g));
    const float w = p.weight != nullptr ? p.weight[i / p.inter] : 1.0f;
    p.out[i] = detail::MulRn(w, detail::MulRn(silu, u));
  }
}

__global__ void __launch_bounds__(kThreads) ListWeightKernel(MoeListWeightParams p) {
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; s < p.slots;
       s += static_cast<int64_t>(gridDim.x) * kThreads) {
    p.list_weight[p.position[s]] = p.weights[s];
  }
}

__global__ void __launch_bounds__(kThreads) MoeCombineKernel(MoeCombineParams p) {
  const int64_t total = p.tokens * p.dim;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = i / p.dim, d = i % p.dim;
    float acc = 0.0f;
    for (int j = 0; j < p.k; ++j) {
      const int64_t row = p.position[t * p.k + j];
      acc = detail::AddRn(acc, p.expert_out[row * p.dim + d]);
    }
    const float v = detail::AddRn(acc, p.shared[i]);
    p.out[i] = p.round_bf16 ? quant::RoundBf16(v) : v;
  }
}

}  // namespace

Status LaunchMoeRoute(const MoeRouteParams& p, cudaStream_t stream) {
  if (p.tokens < 0 || p.n_experts <= 0 || p.k <= 0 || p.k > p.n_experts) {
    return Status::InvalidArgument("MoeRoute: need 0 < k <= experts");
  }
  if (p.tokens == 0) return Status::Ok();
  if (p.logits == nullptr || p.experts == nullptr || p.weights == nullptr ||
      (p.tid2eid != nullptr && p.token_ids == nullptr)) {
    return Status::InvalidArgument("MoeRoute: null pointer");
  }
  MoeRouteKernel<<<GridFor(p.tokens), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("MoeRouteKernel");
}

Status LaunchMoeDispatch(const MoeDispatchParams& p, cudaStream_t stream) {
  if (p.tokens < 0 || p.n_experts <= 0 || p.k <= 0 || p.tile_rows_max <= 0) {
    return Status::InvalidArgument("MoeDispatch: bad sizes");
  }
  if (p.max_tiles < p.tokens * p.k / p.tile_rows_max + p.n_experts) {
    return Status::InvalidArgument("MoeDispatch: max_tiles below tokens * k / tile_rows + experts");
  }
  if (p.tokens == 0) return Status::Ok();
  if (p.experts == nullptr || p.offsets == nullptr || p.list_token == nullptr ||
      p.position == nullptr || p.tile_expert == nullptr || p.tile_row0 == nullptr ||
      p.tile_rows == nullptr || p.chunk_counts == nullptr) {
    return Status::InvalidArgument("MoeDispatch: null pointer");
  }
  if (p.n_experts > kMaxDispatchExperts) {
    return Status::InvalidArgument("MoeDispatch: at most " + std::to_string(kMaxDispatchExperts) +
                                   " experts");
  }
  const int64_t chunks = (p.tokens * p.k + kMoeDispatchChunk - 1) / kMoeDispatchChunk;
  if (chunks > 0x7FFFFFFF) return Status::InvalidArgument("MoeDispatch: too many slots");
  const size_t smem = static_cast<size_t>(p.n_experts) * sizeof(int32_t);
  const unsigned grid = static_cast<unsigned>(chunks);
  MoeDispatchCountKernel<<<grid, 32, smem, stream>>>(p);
  NW_RETURN_IF_ERROR(NW_CUDA_LAUNCH_STATUS("MoeDispatchCountKernel"));
  MoeDispatchScanKernel<<<1, 1024, 0, stream>>>(p, chunks);
  NW_RETURN_IF_ERROR(NW_CUDA_LAUNCH_STATUS("MoeDispatchScanKernel"));
  MoeDispatchPlaceKernel<<<grid, 32, smem, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("MoeDispatchPlaceKernel");
}

Status LaunchSwiGlu(const SwiGluParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.inter <= 0 || p.limit < 0)
    return Status::InvalidArgument("SwiGlu: bad sizes");
  if (p.rows == 0) return Status::Ok();
  if (p.gate == nullptr || p.up == nullptr || p.out == nullptr) {
    return Status::InvalidArgument("SwiGlu: null pointer");
  }
  SwiGluKernel<<<GridFor(p.rows * p.inter), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("SwiGluKernel");
}

Status LaunchMoeListWeights(const MoeListWeightParams& p, cudaStream_t stream) {
  if (p.slots < 0) return Status::InvalidArgument("MoeListWeights: negative slots");
  if (p.slots == 0) return Status::Ok();
  if (p.weights == nullptr || p.position == nullptr || p.list_weight == nullptr) {
    return Status::InvalidArgument("MoeListWeights: null pointer");
  }
  ListWeightKernel<<<GridFor(p.slots), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("ListWeightKernel");
}

Status LaunchMoeCombine(const MoeCombineParams& p, cudaStream_t stream) {
  if (p.tokens < 0 || p.k <= 0 || p.dim <= 0) return Status::InvalidArgument("MoeCombine: sizes");
  if (p.tokens == 0) return Status::Ok();
  if (p.expert_out == nullptr || p.position == nullptr || p.shared == nullptr || p.out == nullptr) {
    return Status::InvalidArgument("MoeCombine: null pointer");
  }
  MoeCombineKernel<<<GridFor(p.tokens * p.dim), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("MoeCombineKernel");
}

}  // namespace nw::cuda
