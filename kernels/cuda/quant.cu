// Quantizers on the GPU; see quant.h. One warp per row, grid-stride over rows: every block of a
// row is reduced by one warp (NaN-propagating amax), then each lane encodes its own values, so a
// row can be quantized in place.
#include <algorithm>
#include <string>

#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/quant.h"
#include "kernels/quant/scalar.h"

namespace nw::cuda {
namespace {

using detail::GroupNanMax;
using detail::NanMax;
using detail::WarpNanMax;
using quant::DecodeE2M1;
using quant::DecodeE4M3;
using quant::DecodeUe8m0;
using quant::EncodeE2M1;
using quant::EncodeE4M3;
using quant::kE2M1Max;
using quant::kE4M3Max;
using quant::Ue8m0ScaleFor;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kNvfp4Block = 16;
constexpr int kMxfp4Block = 32;
constexpr int kKvBlock = 64;

dim3 RowGrid(int64_t rows) {
  const int64_t blocks = (rows + kWarps - 1) / kWarps;
  return dim3(static_cast<unsigned>(std::min<int64_t>(blocks, 64LL * MultiprocessorCount())));
}

struct RowIter {
  int lane;
  int64_t first;
  int64_t step;
};

__device__ __forceinline__ RowIter Rows() {
  return {static_cast<int>(threadIdx.x & 31),
          static_cast<int64_t>(blockIdx.x) * kWarps + static_cast<int64_t>(threadIdx.x >> 5),
          static_cast<int64_t>(gridDim.x) * kWarps};
}

/// amax of x[0..len) over the warp (every lane gets it); lanes read x[lane], x[lane + 32], ...
__device__ __forceinline__ float WarpAbsMax(const float* x, int len, int lane) {
  float a = 0.0f;
  for (int j = lane; j < len; j += 32) a = NanMax(a, fabsf(x[j]));
  return WarpNanMax(a);
}

/// Fake FP8 over x[0..n) in blocks of `block` (> 0).
__device__ __forceinline__ void Fp8FakeRow(const float* x, float* y, int n, int block, int lane) {
  for (int b0 = 0; b0 < n; b0 += block) {
    const int len = min(block, n - b0);
    const float s = DecodeUe8m0(Ue8m0ScaleFor(WarpAbsMax(x + b0, len, lane), kE4M3Max));
    for (int j = lane; j < len; j += 32) y[b0 + j] = DecodeE4M3(EncodeE4M3(x[b0 + j] / s)) * s;
  }
}

__device__ __forceinline__ void Mxfp4FakeRow(const float* x, float* y, int n, int lane) {
  for (int j0 = 0; j0 < n; j0 += kMxfp4Block) {
    const int j = j0 + lane;
    const bool valid = j < n;
    const float v = valid ? x[j] : 0.0f;
    const float s = DecodeUe8m0(Ue8m0ScaleFor(WarpNanMax(fabsf(v)), kE2M1Max));
    if (valid) y[j] = DecodeE2M1(EncodeE2M1(v / s)) * s;
  }
}

/// NVFP4 row state: the global scale and the special cases of quant::FakeQuantNvfp4.
struct Nvfp4Row {
  float s_global;
  bool non_finite;  // amax is NaN or inf: everything NaN
  bool zero;        // s_global == 0: signed zeros
};

__device__ __forceinline__ Nvfp4Row Nvfp4RowScale(const float* x, int n, int lane) {
  const float amax = WarpAbsMax(x, n, lane);
  Nvfp4Row r;
  r.non_finite = !isfinite(amax);
  r.s_global = r.non_finite ? quant::QuietNan() : amax / (kE4M3Max * kE2M1Max);
  r.zero = !r.non_finite && r.s_global == 0.0f;
  return r;
}

/// The e4m3 block-scale byte of the 16-block holding lane's value (lanes 0-15 and 16-31 are two
/// blocks); `v` is the lane's value (0 for lanes past the end).
__device__ __forceinline__ uint8_t Nvfp4BlockByte(float v, float s_global) {
  const float a = GroupNanMax(fabsf(v), kNvfp4Block);
  return EncodeE4M3(a / (kE2M1Max * s_global));
}

__device__ __forceinline__ void Nvfp4FakeRow(const float* x, float* y, int n, int lane) {
  const Nvfp4Row r = Nvfp4RowScale(x, n, lane);
  for (int j0 = 0; j0 < n; j0 += 32) {
    const int j = j0 + lane;
    const bool valid = j < n;
    const float v = valid ? x[j] : 0.0f;
    if (r.non_finite || r.zero) {
      if (valid) y[j] = r.non_finite ? quant::QuietNan() : copysignf(0.0f, v);
      continue;
    }
    const float s_block = DecodeE4M3(Nvfp4BlockByte(v, r.s_global));
    if (!valid) continue;
    if (s_block == 0.0f) {
      y[j] = copysignf(0.0f, v);
    } else {
      const float s = s_block * r.s_global;
      y[j] = (DecodeE2M1(EncodeE2M1(v / s)) * s_block) * r.s_global;
    }
  }
}

constexpr int kBf16Batch = 8;  // values a lane loads before it stores (FakeQuantKernel, bf16)

__global__ void __launch_bounds__(kThreads, 1) FakeQuantKernel(FakeQuantParams p) {
  const RowIter it = Rows();
  for (int64_t r = it.first; r < p.rows; r += it.step) {
    const float* x = p.x + r * p.x_stride;
    float* y = p.y + r * p.y_stride;
    switch (p.format) {
      case QuantFormat::kBf16:
        // Eight loads in flight a lane, then their stores: y may be x, and a store the compiler
        // cannot move a later load above made a serial chain of one round trip a value.
        for (int j0 = it.lane; j0 < p.cols; j0 += 32 * kBf16Batch) {
          float v[kBf16Batch];
#pragma unroll
          for (int k = 0; k < kBf16Batch; ++k) {
            const int j = j0 + 32 * k;
            v[k] = j < p.cols ? x[j] : 0.0f;
          }
#pragma unroll
          for (int k = 0; k < kBf16Batch; ++k) {
            const int j = j0 + 32 * k;
            if (j < p.cols) y[j] = quant::RoundBf16(v[k]);
          }
        }
        break;
      case QuantFormat::kFp8:
        Fp8FakeRow(x, y, p.cols, p.fp8_block > 0 ? p.fp8_block : max(p.cols, 1), it.lane);
        break;
      case QuantFormat::kMxfp4:
        Mxfp4FakeRow(x, y, p.cols, it.lane);
        break;
      case QuantFormat::kNvfp4:
        Nvfp4FakeRow(x, y, p.cols, it.lane);
        break;
      case QuantFormat::kV4Kv: {
        const int nope = p.cols - p.rope_dim;
        Fp8FakeRow(x, y, nope, kKvBlock, it.lane);
        for (int j = nope + it.lane; j < p.cols; j += 32) y[j] = quant::RoundBf16(x[j]);
        break;
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads) PackBf16Kernel(PackBf16Params p) {
  const RowIter it = Rows();
  for (int64_t r = it.first; r < p.rows; r += it.step) {
    const float* x = p.x + r * p.x_stride;
    uint16_t* y = p.y + r * p.y_stride;
    for (int j = it.lane; j < p.cols; j += 32) y[j] = quant::FloatToBf16Bits(x[j]);
  }
}

__global__ void __launch_bounds__(kThreads) PackKernel(PackParams p) {
  const RowIter it = Rows();
  const int lane = it.lane;
  for (int64_t r = it.first; r < p.rows; r += it.step) {
    const float* x = p.x + r * p.x_stride;
    uint8_t* codes = p.codes + r * p.codes_stride;
    uint8_t* scales = p.scales + r * p.scales_stride;
    const int n = p.cols;
    if (p.format == PackedFormat::kFp8) {
      const int block = p.fp8_block > 0 ? p.fp8_block : max(n, 1);
      for (int b0 = 0; b0 < n; b0 += block) {
        const int len = min(block, n - b0);
        const uint8_t byte = Ue8m0ScaleFor(WarpAbsMax(x + b0, len, lane), kE4M3Max);
        const float s = DecodeUe8m0(byte);
        for (int j = lane; j < len; j += 32) codes[b0 + j] = EncodeE4M3(x[b0 + j] / s);
        if (lane == 0) scales[b0 / block] = byte;
      }
    } else if (p.format == PackedFormat::kMxfp4) {
      for (int j0 = 0; j0 < n; j0 += kMxfp4Block) {
        const int j = j0 + lane;
        const bool valid = j < n;
        const float v = valid ? x[j] : 0.0f;
        const uint8_t byte = Ue8m0ScaleFor(WarpNanMax(fabsf(v)), kE2M1Max);
        const uint8_t code = EncodeE2M1(v / DecodeUe8m0(byte));
        const uint8_t hi = static_cast<uint8_t>(__shfl_down_sync(detail::kFullMask, code, 1));
        if (valid && (j % 2) == 0) codes[j / 2] = static_cast<uint8_t>(code | (hi << 4));
        if (lane == 0) scales[j0 / kMxfp4Block] = byte;
      }
    } else {  // kNvfp4
      const Nvfp4Row row = Nvfp4RowScale(x, n, lane);
      if (lane == 0) p.global[r] = row.s_global;
      for (int j0 = 0; j0 < n; j0 += 32) {
        const int j = j0 + lane;
        const bool valid = j < n;
        const float v = valid ? x[j] : 0.0f;
        uint8_t byte = 0;
        uint8_t code = 0;
        if (!row.non_finite && !row.zero) {
          byte = Nvfp4BlockByte(v, row.s_global);
          const float s_block = DecodeE4M3(byte);
          code = s_block == 0.0f ? static_cast<uint8_t>(signbit(v) ? 0x8u : 0x0u)
                                 : EncodeE2M1(v / (s_block * row.s_global));
        } else if (row.zero) {
          code = static_cast<uint8_t>(signbit(v) ? 0x8u : 0x0u);
        }
        const uint8_t hi = static_cast<uint8_t>(__shfl_down_sync(detail::kFullMask, code, 1));
        if (valid && (j % 2) == 0) codes[j / 2] = static_cast<uint8_t>(code | (hi << 4));
        if (valid && (j % kNvfp4Block) == 0) scales[j / kNvfp4Block] = byte;
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads) UnpackKernel(UnpackParams p) {
  const RowIter it = Rows();
  for (int64_t r = it.first; r < p.rows; r += it.step) {
    const uint8_t* codes = p.codes + r * p.codes_stride;
    const uint8_t* scales = p.scales + r * p.scales_stride;
    float* y = p.y + r * p.y_stride;
    if (p.format == PackedFormat::kFp8) {
      const int block = p.fp8_block > 0 ? p.fp8_block : max(p.cols, 1);
      for (int j = it.lane; j < p.cols; j += 32) {
        y[j] = DecodeE4M3(codes[j]) * DecodeUe8m0(scales[j / block]);
      }
    } else {
      const bool mx = p.format == PackedFormat::kMxfp4;
      const float g = mx ? 1.0f : p.global[r];
      for (int j = it.lane; j < p.cols; j += 32) {
        const uint8_t code = static_cast<uint8_t>(codes[j / 2] >> ((j % 2) * 4)) & 0xFu;
        if (mx) {
          y[j] = DecodeE2M1(code) * DecodeUe8m0(scales[j / kMxfp4Block]);
        } else {
          y[j] = (DecodeE2M1(code) * DecodeE4M3(scales[j / kNvfp4Block])) * g;
        }
      }
    }
  }
}

struct KvAddr {
  uint8_t* data;    // the token's [nope | rope] bytes
  uint8_t* scales;  // the token's scale group
};

__device__ __forceinline__ KvAddr KvSlot(uint8_t* cache, int64_t slot, const V4KvLayout& l) {
  const int64_t page = slot / l.page_size, off = slot % l.page_size;
  uint8_t* base = cache + page * l.PageBytes();
  return {base + off * l.TokenBytes(), base + l.page_size * l.TokenBytes() + off * l.ScaleStride()};
}

__global__ void __launch_bounds__(kThreads) StoreV4KvKernel(StoreV4KvParams p) {
  const RowIter it = Rows();
  const V4KvLayout& l = p.layout;
  const int nope = l.nope();
  const int64_t capacity = p.num_pages * l.page_size;
  for (int64_t t = it.first; t < p.tokens; t += it.step) {
    const int64_t slot = p.slots[t];
    if (slot < 0 || slot >= capacity) continue;
    const float* x = p.x + t * p.x_stride;
    const KvAddr a = KvSlot(p.cache, slot, l);
    for (int b0 = 0; b0 < nope; b0 += kKvBlock) {
      const uint8_t byte = Ue8m0ScaleFor(WarpAbsMax(x + b0, kKvBlock, it.lane), kE4M3Max);
      const float s = DecodeUe8m0(byte);
      for (int j = it.lane; j < kKvBlock; j += 32) a.data[b0 + j] = EncodeE4M3(x[b0 + j] / s);
      if (it.lane == 0) a.scales[b0 / kKvBlock] = byte;
    }
    uint16_t* rope = reinterpret_cast<uint16_t*>(a.data + nope);
    for (int j = it.lane; j < l.rope_dim; j += 32) rope[j] = quant::FloatToBf16Bits(x[nope + j]);
    for (int j = l.scale_count() + it.lane; j < l.ScaleStride(); j += 32) a.scales[j] = 0;
  }
}

__global__ void __launch_bounds__(kThreads) LoadV4KvKernel(LoadV4KvParams p) {
  const RowIter it = Rows();
  const V4KvLayout& l = p.layout;
  const int nope = l.nope();
  const int64_t capacity = p.num_pages * l.page_size;
  for (int64_t t = it.first; t < p.tokens; t += it.step) {
    const int64_t slot = p.slots[t];
    float* y = p.y + t * p.y_stride;
    if (slot < 0 || slot >= capacity) {
      for (int j = it.lane; j < l.head_dim; j += 32) y[j] = 0.0f;
      continue;
    }
    const KvAddr a = KvSlot(const_cast<uint8_t*>(p.cache), slot, l);
    for (int j = it.lane; j < nope; j += 32) {
      y[j] = DecodeE4M3(a.data[j]) * DecodeUe8m0(a.scales[j / kKvBlock]);
    }
    const uint16_t* rope = reinterpret_cast<const uint16_t*>(a.data + nope);
    for (int j = it.lane; j < l.rope_dim; j += 32) y[nope + j] = quant::Bf16BitsToFloat(rope[j]);
  }
}

Status CheckRows(int64_t rows, int cols, const char* what) {
  if (rows < 0 || cols < 0) {
    return Status::InvalidArgument(std::string(what) + ": negative rows or cols");
  }
  return Status::Ok();
}

Status CheckStride(int64_t* stride, int64_t min, const char* what) {
  if (*stride == 0) *stride = min;
  if (*stride < min) {
    return Status::InvalidArgument(std::string(what) + " stride " + std::to_string(*stride) +
                                   " is below the row width " + std::to_string(min));
  }
  return Status::Ok();
}

}  // namespace

Status V4KvLayout::Validate() const {
  if (head_dim <= 0 || rope_dim < 0 || rope_dim > head_dim || rope_dim % 2 != 0 ||
      nope() % kKvBlock != 0 || page_size <= 0) {
    return Status::InvalidArgument(
        "V4 KV layout needs 0 <= rope_dim <= head_dim, rope_dim even, (head_dim - rope_dim) a "
        "multiple of 64 and page_size > 0; got head_dim " +
        std::to_string(head_dim) + ", rope_dim " + std::to_string(rope_dim) + ", page_size " +
        std::to_string(page_size));
  }
  return Status::Ok();
}

Status LaunchFakeQuant(const FakeQuantParams& params, cudaStream_t stream) {
  FakeQuantParams p = params;
  NW_RETURN_IF_ERROR(CheckRows(p.rows, p.cols, "FakeQuant"));
  if (p.rows == 0 || p.cols == 0) return Status::Ok();
  if (p.x == nullptr || p.y == nullptr) return Status::InvalidArgument("FakeQuant: null pointer");
  NW_RETURN_IF_ERROR(CheckStride(&p.x_stride, p.cols, "FakeQuant x"));
  NW_RETURN_IF_ERROR(CheckStride(&p.y_stride, p.cols, "FakeQuant y"));
  if (p.x == p.y && p.x_stride != p.y_stride) {
    return Status::InvalidArgument("FakeQuant in place needs equal strides");
  }
  if (p.format == QuantFormat::kFp8 && p.fp8_block < 0) {
    return Status::InvalidArgument("FakeQuant: negative fp8_block");
  }
  if (p.format == QuantFormat::kV4Kv &&
      (p.rope_dim < 0 || p.rope_dim > p.cols || (p.cols - p.rope_dim) % kKvBlock != 0)) {
    return Status::InvalidArgument("FakeQuant V4 KV: cols - rope_dim must be a multiple of 64");
  }
  FakeQuantKernel<<<RowGrid(p.rows), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("FakeQuantKernel");
}

Status LaunchPackBf16(const PackBf16Params& params, cudaStream_t stream) {
  PackBf16Params p = params;
  NW_RETURN_IF_ERROR(CheckRows(p.rows, p.cols, "PackBf16"));
  if (p.rows == 0 || p.cols == 0) return Status::Ok();
  if (p.x == nullptr || p.y == nullptr) return Status::InvalidArgument("PackBf16: null pointer");
  NW_RETURN_IF_ERROR(CheckStride(&p.x_stride, p.cols, "PackBf16 x"));
  NW_RETURN_IF_ERROR(CheckStride(&p.y_stride, p.cols, "PackBf16 y"));
  PackBf16Kernel<<<RowGrid(p.rows), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("PackBf16Kernel");
}

namespace {

/// Packed widths of one row: code bytes and scale bytes.
Status PackedWidths(PackedFormat f, int cols, int fp8_block, int64_t* code_bytes,
                    int64_t* scale_bytes) {
  switch (f) {
    case PackedFormat::kFp8: {
      if (fp8_block < 0) return Status::InvalidArgument("Pack: negative fp8_block");
      const int block = fp8_block > 0 ? fp8_block : std::max(cols, 1);
      *code_bytes = cols;
      *scale_bytes = (cols + block - 1) / block;
      return Status::Ok();
    }
    case PackedFormat::kMxfp4:
    case PackedFormat::kNvfp4: {
      if (cols % 2 != 0) return Status::InvalidArgument("Pack: fp4 rows need an even width");
      const int block = f == PackedFormat::kMxfp4 ? kMxfp4Block : kNvfp4Block;
      *code_bytes = cols / 2;
      *scale_bytes = (cols + block - 1) / block;
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("Pack: unknown format");
}

}  // namespace

Status LaunchPack(const PackParams& params, cudaStream_t stream) {
  PackParams p = params;
  NW_RETURN_IF_ERROR(CheckRows(p.rows, p.cols, "Pack"));
  if (p.rows == 0 || p.cols == 0) return Status::Ok();
  int64_t code_bytes = 0, scale_bytes = 0;
  NW_RETURN_IF_ERROR(PackedWidths(p.format, p.cols, p.fp8_block, &code_bytes, &scale_bytes));
  if (p.x == nullptr || p.codes == nullptr || p.scales == nullptr ||
      (p.format == PackedFormat::kNvfp4 && p.global == nullptr)) {
    return Status::InvalidArgument("Pack: null pointer");
  }
  NW_RETURN_IF_ERROR(CheckStride(&p.x_stride, p.cols, "Pack x"));
  NW_RETURN_IF_ERROR(CheckStride(&p.codes_stride, code_bytes, "Pack codes"));
  NW_RETURN_IF_ERROR(CheckStride(&p.scales_stride, scale_bytes, "Pack scales"));
  PackKernel<<<RowGrid(p.rows), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("PackKernel");
}

Status LaunchUnpack(const UnpackParams& params, cudaStream_t stream) {
  UnpackParams p = params;
  NW_RETURN_IF_ERROR(CheckRows(p.rows, p.cols, "Unpack"));
  if (p.rows == 0 || p.cols == 0) return Status::Ok();
  int64_t code_bytes = 0, scale_bytes = 0;
  NW_RETURN_IF_ERROR(PackedWidths(p.format, p.cols, p.fp8_block, &code_bytes, &scale_bytes));
  if (p.y == nullptr || p.codes == nullptr || p.scales == nullptr ||
      (p.format == PackedFormat::kNvfp4 && p.global == nullptr)) {
    return Status::InvalidArgument("Unpack: null pointer");
  }
  NW_RETURN_IF_ERROR(CheckStride(&p.y_stride, p.cols, "Unpack y"));
  NW_RETURN_IF_ERROR(CheckStride(&p.codes_stride, code_bytes, "Unpack codes"));
  NW_RETURN_IF_ERROR(CheckStride(&p.scales_stride, scale_bytes, "Unpack scales"));
  UnpackKernel<<<RowGrid(p.rows), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("UnpackKernel");
}

Status LaunchStoreV4Kv(const StoreV4KvParams& params, cudaStream_t stream) {
  StoreV4KvParams p = params;
  NW_RETURN_IF_ERROR(p.layout.Validate());
  if (p.tokens < 0 || p.num_pages < 0) return Status::InvalidArgument("StoreV4Kv: negative size");
  if (p.tokens == 0) return Status::Ok();
  if (p.x == nullptr || p.slots == nullptr || p.cache == nullptr) {
    return Status::InvalidArgument("StoreV4Kv: null pointer");
  }
  NW_RETURN_IF_ERROR(CheckStride(&p.x_stride, p.layout.head_dim, "StoreV4Kv x"));
  StoreV4KvKernel<<<RowGrid(p.tokens), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("StoreV4KvKernel");
}

Status LaunchLoadV4Kv(const LoadV4KvParams& params, cudaStream_t stream) {
  LoadV4KvParams p = params;
  NW_RETURN_IF_ERROR(p.layout.Validate());
  if (p.tokens < 0 || p.num_pages < 0) return Status::InvalidArgument("LoadV4Kv: negative size");
  if (p.tokens == 0) return Status::Ok();
  if (p.y == nullptr || p.slots == nullptr || p.cache == nullptr) {
    return Status::InvalidArgument("LoadV4Kv: null pointer");
  }
  NW_RETURN_IF_ERROR(CheckStride(&p.y_stride, p.layout.head_dim, "LoadV4Kv y"));
  LoadV4KvKernel<<<RowGrid(p.tokens), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("LoadV4KvKernel");
}

}  // namespace nw::cuda
