// Sparse attention: launcher and the SIMT fp32 path (see attention.h). A block takes one query
// and 8 heads (4 for models with at most 4); 32-entry tiles of gathered (dequantized) KV rows go
// through shared memory: one thread per (head, entry) dot product, one warp per head for the online
// softmax, one thread per (dims) column for the weighted sum.
#include <algorithm>
#include <string>

#include "kernels/cuda/attention_impl.cuh"
#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"

namespace nw::cuda {
namespace {

// Heads per block (one warp each in the softmax): 8, or 4 when the model has at most 4 (no warp
// then works on an absent head). The arithmetic of a (query, head) is the same in both.
constexpr int kEntries = 32;  // entries per tile (one lane each)
constexpr int kMaxDim = 512;

template <KvFormat kFormat>
__device__ __forceinline__ float KvValue(const KvSet& s, const SparseAttentionParams& p,
                                         int64_t row, int c) {
  if constexpr (kFormat == KvFormat::kFp32) {
    return static_cast<const float*>(s.kv)[row * p.head_dim + c];
  } else if constexpr (kFormat == KvFormat::kBf16) {
    return quant::Bf16BitsToFloat(static_cast<const uint16_t*>(s.kv)[row * p.head_dim + c]);
  } else {
    return detail::V4Value(detail::V4RowAt(s.kv, p.kv_layout, row), p.kv_layout, c);
  }
}

template <KvFormat kFormat, int kHeads>
__global__ void __launch_bounds__(kHeads * 32) SparseAttentionKernel(SparseAttentionParams p) {
  constexpr int kThreads = kHeads * 32;
  constexpr int kDimsPerThread = kMaxDim / kThreads;
  extern __shared__ float4 smem4[];
  // Rows d + 4 floats apart: 16-byte aligned, and a quarter-warp's 16-byte loads of 8 rows hit
  // distinct banks (ld = 4 mod 32 for head dims that are multiples of 32).
  const int d = p.head_dim, ld = d + 4;
  float* sq = reinterpret_cast<float*>(smem4);  // [kHeads, d]
  float* skv = sq + kHeads * d;                 // [kEntries, d + 4]
  float* sp = skv + kEntries * ld;              // [kHeads, kEntries]
  float* scorr = sp + kHeads * kEntries;        // [kHeads]
  __shared__ int s_set[kEntries];
  __shared__ int64_t s_row[kEntries];

  const int64_t i = blockIdx.x;
  const int h_base = blockIdx.y * kHeads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float* q = static_cast<const float*>(p.q) + (i * p.n_heads + h_base) * d;
  for (int t = threadIdx.x; t < kHeads * d; t += kThreads) {
    sq[t] = h_base + t / d < p.n_heads ? q[t] : 0.0f;
  }
  const int64_t len0 = detail::SetLength(p.sets[0], i);
  const int64_t total = len0 + detail::SetLength(p.sets[1], i);

  // Softmax state of head h_base + warp (every lane holds it).
  const int my_head = h_base + warp;
  float m = my_head < p.n_heads ? p.sink[my_head] : 0.0f;
  float l = m == -INFINITY ? 0.0f : 1.0f;  // e^{sink - m}
  float acc[kHeads][kDimsPerThread];
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
#pragma unroll
    for (int c = 0; c < kDimsPerThread; ++c) acc[h][c] = 0.0f;
  }

  for (int64_t s0 = 0; s0 < total; s0 += kEntries) {
    __syncthreads();  // the previous tile is no longer read
    if (threadIdx.x < kEntries) {
      const int64_t s = s0 + threadIdx.x;
      detail::Slot slot{0, -1};
      if (s < total) slot = detail::SlotAt(p, i, len0, s);
      s_set[threadIdx.x] = slot.set;
      s_row[threadIdx.x] = slot.row;
    }
    __syncthreads();
    if constexpr (kFormat == KvFormat::kV4Fp8) {
      for (int t = threadIdx.x; t < kEntries * d; t += kThreads) {
        const int e = t / d, c = t % d;
        const int64_t row = s_row[e];
        skv[e * ld + c] = row < 0 ? 0.0f : KvValue<kFormat>(p.sets[s_set[e]], p, row, c);
      }
    } else {
      // Four values a thread and step (d is a multiple of 4 and the buffers 16-byte aligned).
      const int q4 = d / 4;
      for (int t = threadIdx.x; t < kEntries * q4; t += kThreads) {
        const int e = t / q4, c = (t % q4) * 4;
        const int64_t row = s_row[e];
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (row >= 0) {
          if constexpr (kFormat == KvFormat::kFp32) {
            const float* src = static_cast<const float*>(p.sets[s_set[e]].kv) + row * d + c;
            v = *reinterpret_cast<const float4*>(src);  // 16-byte aligned (checked at launch)
          } else {
            const uint16_t* src = static_cast<const uint16_t*>(p.sets[s_set[e]].kv) + row * d + c;
            const uint2 b = *reinterpret_cast<const uint2*>(src);
            v = make_float4(quant::Bf16BitsToFloat(static_cast<uint16_t>(b.x & 0xFFFFu)),
                            quant::Bf16BitsToFloat(static_cast<uint16_t>(b.x >> 16)),
                            quant::Bf16BitsToFloat(static_cast<uint16_t>(b.y & 0xFFFFu)),
                            quant::Bf16BitsToFloat(static_cast<uint16_t>(b.y >> 16)));
          }
        }
        *reinterpret_cast<float4*>(skv + e * ld + c) = v;
      }
    }
    __syncthreads();
    // Logits: warp = head, lane = entry; one running sum in dimension order.
    {
      const float* qh = sq + warp * d;
      const float* kv = skv + lane * ld;
      float z = 0.0f;
      for (int c = 0; c < d; c += 4) {
        const float4 a = *reinterpret_cast<const float4*>(qh + c);
        const float4 b = *reinterpret_cast<const float4*>(kv + c);
        z += a.x * b.x;
        z += a.y * b.y;
        z += a.z * b.z;
        z += a.w * b.w;
      }
      z *= p.scale;
      const bool valid = s_row[lane] >= 0;
      const float tile_max = detail::WarpMax(valid ? z : -INFINITY);
      const float m_new = fmaxf(m, tile_max);
      float corr = 1.0f, e = 0.0f;
      if (m_new != -INFINITY) {
        corr = expf(m - m_new);
        e = valid ? expf(z - m_new) : 0.0f;
      }
      l = l * corr + detail::WarpSum(e);
      m = m_new;
      sp[warp * kEntries + lane] = e;
      if (lane == 0) scorr[warp] = corr;
    }
    __syncthreads();
    // Weighted sum: thread = dims threadIdx.x + kThreads c; each KV value read once for every
    // head, each head's sum still in entry order.
#pragma unroll
    for (int c = 0; c < kDimsPerThread; ++c) {
      const int dim = threadIdx.x + c * kThreads;
      if (dim >= d) continue;
#pragma unroll
      for (int h = 0; h < kHeads; ++h) acc[h][c] *= scorr[h];
#pragma unroll 4
      for (int e = 0; e < kEntries; ++e) {
        const float v = skv[e * ld + dim];
#pragma unroll
        for (int h = 0; h < kHeads; ++h) acc[h][c] += sp[h * kEntries + e] * v;
      }
    }
  }
  // Normalise: 1 / l of each head comes from its warp through shared memory.
  __syncthreads();
  if (lane == 0) scorr[warp] = 1.0f / l;
  __syncthreads();
  float* out = p.out + (i * p.n_heads + h_base) * d;
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    if (h_base + h >= p.n_heads) break;
#pragma unroll
    for (int c = 0; c < kDimsPerThread; ++c) {
      const int dim = threadIdx.x + c * kThreads;
      if (dim < d) {
        const float v = acc[h][c] * scorr[h];
        out[h * d + dim] = p.round_bf16 ? quant::RoundBf16(v) : v;
      }
    }
  }
}

Status CheckSet(const KvSet& s, const char* name) {
  if (s.indices == nullptr) return Status::Ok();
  if (s.rows < 0 || s.index_stride < 0) {
    return Status::InvalidArgument(std::string("SparseAttention ") + name + ": negative size");
  }
  if (s.rows > 0 && s.kv == nullptr) {
    return Status::InvalidArgument(std::string("SparseAttention ") + name + ": null kv");
  }
  if ((reinterpret_cast<uintptr_t>(s.kv) % 16) != 0) {
    return Status::InvalidArgument(std::string("SparseAttention ") + name +
                                   ": kv must be 16-byte aligned");
  }
  return Status::Ok();
}

template <KvFormat kFormat, int kHeads>
Status LaunchSimtAs(const SparseAttentionParams& p, size_t smem, cudaStream_t stream) {
  void (*kernel)(SparseAttentionParams) = SparseAttentionKernel<kFormat, kHeads>;
  NW_RETURN_IF_ERROR(AllowDynamicSharedMemory(reinterpret_cast<const void*>(kernel), smem,
                                              "SparseAttentionKernel"));
  const dim3 grid(static_cast<unsigned>(p.m),
                  static_cast<unsigned>((p.n_heads + kHeads - 1) / kHeads));
  kernel<<<grid, kHeads * 32, smem, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("SparseAttentionKernel");
}

template <int kHeads>
Status LaunchSimt(const SparseAttentionParams& p, cudaStream_t stream) {
  const int d = p.head_dim;
  const size_t smem = (static_cast<size_t>(kHeads) * d + static_cast<size_t>(kEntries) * (d + 4) +
                       kHeads * kEntries + kHeads) *
                      sizeof(float);
  switch (p.kv_format) {
    case KvFormat::kFp32:
      return LaunchSimtAs<KvFormat::kFp32, kHeads>(p, smem, stream);
    case KvFormat::kBf16:
      return LaunchSimtAs<KvFormat::kBf16, kHeads>(p, smem, stream);
    case KvFormat::kV4Fp8:
      return LaunchSimtAs<KvFormat::kV4Fp8, kHeads>(p, smem, stream);
  }
  return Status::InvalidArgument("SparseAttention: unknown KV format");
}

}  // namespace

Status LaunchSparseAttention(const SparseAttentionParams& p, cudaStream_t stream) {
  if (p.m < 0 || p.n_heads < 1 || p.head_dim < 4 || p.head_dim % 4 != 0) {
    return Status::InvalidArgument(
        "SparseAttention: need m >= 0, n_heads >= 1, head_dim a "
        "positive multiple of 4");
  }
  if (p.m == 0) return Status::Ok();
  if (p.m > 0x7FFFFFFF) return Status::InvalidArgument("SparseAttention: more than 2^31 queries");
  if (p.q == nullptr || p.sink == nullptr || p.out == nullptr) {
    return Status::InvalidArgument("SparseAttention: null pointer");
  }
  NW_RETURN_IF_ERROR(CheckSet(p.sets[0], "set 0"));
  NW_RETURN_IF_ERROR(CheckSet(p.sets[1], "set 1"));
  if (p.kv_format == KvFormat::kV4Fp8) {
    NW_RETURN_IF_ERROR(p.kv_layout.Validate());
    if (p.kv_layout.head_dim != p.head_dim) {
      return Status::InvalidArgument("SparseAttention: V4 KV layout head_dim differs");
    }
  }
  if (p.q_bf16) {
    if ((p.head_dim != 128 && p.head_dim != 512) || p.n_heads > 64 ||
        p.kv_format == KvFormat::kFp32) {
      return Status::InvalidArgument(
          "SparseAttention (tensor cores): need head_dim 128 or 512, n_heads <= 64 and bf16 or "
          "V4 fp8 KV");
    }
    if ((p.tc_kernel == AttentionTcKernel::kAuto ||
         p.tc_kernel == AttentionTcKernel::kWgmmaPairs) &&
        detail::PairsAttentionApplies(p)) {
      return detail::LaunchSparseAttentionPairs(p, stream);
    }
    if (p.tc_kernel != AttentionTcKernel::kMma && p.tc_kernel != AttentionTcKernel::kWgmmaPairs &&
        detail::WgmmaAttentionApplies(p)) {
      return detail::LaunchSparseAttentionWgmma(p, p.tc_kernel, stream);
    }
    return detail::LaunchSparseAttentionMma(p, stream);
  }
  if (p.head_dim > kMaxDim) {
    return Status::InvalidArgument("SparseAttention: head_dim above 512");
  }
  if (p.bf16_values && p.head_dim == detail::kFewHeadsDim && p.n_heads <= detail::kFewHeadsMax &&
      p.kv_format == KvFormat::kBf16) {
    return detail::LaunchSparseAttentionFewHeads(p, stream);
  }
  if (p.n_heads <= 4) return LaunchSimt<4>(p, stream);
  return LaunchSimt<8>(p, stream);
}

}  // namespace nw::cuda
