// Compressor pooling on the GPU; see compress.h. One thread per (entry, channel); the span's
// rows are walked three times (max, denominator, weighted sum), each exp recomputed identically,
// the loads of each walk issued eight rows ahead of its sums.
#include <algorithm>
#include <string>

#include "kernels/cuda/common.h"
#include "kernels/cuda/compress.h"
#include "kernels/cuda/device_util.cuh"

namespace nw::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kBatch = 8;  // rows a thread loads ahead of its serial sums

__device__ __forceinline__ float ExpRn(float x) {
  return static_cast<float>(exp(static_cast<double>(x)));
}

__global__ void __launch_bounds__(kThreads) CompressPoolKernel(CompressPoolParams p) {
  const int c = blockIdx.x * kThreads + threadIdx.x;
  if (c >= p.dim) return;
  const int span = p.overlap ? 2 * p.ratio : p.ratio;
  for (int64_t i = blockIdx.y; i < p.n_entries; i += gridDim.y) {
    const int64_t e = p.first_entry + i;
    const int64_t first_token = static_cast<int64_t>(p.ratio) * (p.overlap ? e - 1 : e);
    // Tokens before 0 are absent; k0 is the first present one.
    const int k0 = first_token < 0 ? static_cast<int>(-first_token) : 0;
    auto col = [&](int k) { return (p.overlap && k >= p.ratio) ? p.dim + c : c; };
    auto row = [&](int k) { return (first_token + k - p.first_pos) * p.row_stride; };
    // Each walk loads kBatch rows before it sums them (the same operations in the same order):
    // one at a time, a ratio-128 span cost a memory latency a row (91 us for 16 entries).
    float m = -INFINITY;
    for (int kb = k0; kb < span; kb += kBatch) {
      float s[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        s[j] = kb + j < span ? p.score[row(kb + j) + col(kb + j)] : -INFINITY;
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) m = m < s[j] ? s[j] : m;  // std::max(m, s)
    }
    float denom = 0.0f;
    for (int kb = k0; kb < span; kb += kBatch) {
      float s[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        s[j] = kb + j < span ? p.score[row(kb + j) + col(kb + j)] : 0;
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (kb + j < span) denom = detail::AddRn(denom, ExpRn(s[j] - m));
      }
    }
    float acc = 0.0f;
    for (int kb = k0; kb < span; kb += kBatch) {
      float s[kBatch], v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const bool in = kb + j < span;
        s[j] = in ? p.score[row(kb + j) + col(kb + j)] : 0;
        v[j] = in ? p.kv[row(kb + j) + col(kb + j)] : 0;
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (kb + j < span) {
          const float w = ExpRn(s[j] - m) / denom;
          acc = detail::AddRn(acc, detail::MulRn(v[j], w));
        }
      }
    }
    p.out[i * p.out_stride + c] = acc;
  }
}

}  // namespace

Status LaunchCompressPool(const CompressPoolParams& params, cudaStream_t stream) {
  CompressPoolParams p = params;
  if (p.ratio <= 0 || p.dim <= 0 || p.n_rows < 0 || p.n_entries < 0 || p.first_entry < 0) {
    return Status::InvalidArgument("CompressPool: ratio and dim must be positive, counts >= 0");
  }
  if (p.n_entries == 0) return Status::Ok();
  if (p.kv == nullptr || p.score == nullptr || p.out == nullptr) {
    return Status::InvalidArgument("CompressPool: null pointer");
  }
  const int64_t width = (p.overlap ? 2 : 1) * static_cast<int64_t>(p.dim);
  if (p.row_stride == 0) p.row_stride = width;
  if (p.out_stride == 0) p.out_stride = p.dim;
  if (p.row_stride < width || p.out_stride < p.dim) {
    return Status::InvalidArgument("CompressPool: stride below the row width");
  }
  const int64_t need_first =
      std::max<int64_t>(0, p.ratio * (p.overlap ? p.first_entry - 1 : p.first_entry));
  const int64_t need_last = p.ratio * (p.first_entry + p.n_entries) - 1;
  if (need_first < p.first_pos || need_last >= p.first_pos + p.n_rows) {
    return Status::InvalidArgument(
        "CompressPool: entries [" + std::to_string(p.first_entry) + ", " +
        std::to_string(p.first_entry + p.n_entries) + ") need tokens [" +
        std::to_string(need_first) + ", " + std::to_string(need_last + 1) + "), rows hold [" +
        std::to_string(p.first_pos) + ", " + std::to_string(p.first_pos + p.n_rows) + ")");
  }
  const dim3 grid(static_cast<unsigned>((p.dim + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<int64_t>(p.n_entries, 65535)));
  CompressPoolKernel<<<grid, kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("CompressPoolKernel");
}

}  // namespace nw::cuda
