// The W-resident tensor-core linear (linear.h): dense and batched products with many rows and a
// weight matrix small enough to sit whole in shared memory (the tiny model's projections: 128 to
// 512 outputs over 128 or 256 inputs). The tiled kernel (linear_mma.cu) gives each block a
// 32 x 64 tile, so every block stages its W slice again from L2 and x is read once per 64
// outputs; its blocks live for a handful of k tiles, and each warp's 16 x 32 piece of a tile
// costs as many instructions in fragment loads as in MMAs.
// Here a persistent block (grid: as many as fit at once) loads all of W (each piece) into shared
// memory once, then streams its row tiles of x through cp.async buffers, 64 inputs at a time,
// one pipeline across all of its tiles. Its eight warps split a tile as kRowWarps (16 rows each)
// x 8 / kRowWarps (an equal share of the outputs each, up to 16 n8 tiles): 128-row tiles for up
// to 128 outputs, 64 rows for up to 256, 32 rows for up to 512, so every warp runs up to 16 MMAs
// for each A fragment it loads.
// Same arithmetic as the tiled kernel: A fragments rounded or split from the fp32 x tile as they
// load, for each k16 step in ascending order the W pieces smallest first and for each the x
// pieces smallest first, steps up to the next multiple of 32 inputs (the tiled kernel's k tiles:
// the padding's zero products included), so each output is the same sequence of mma.sync
// operations on the same accumulator and the results are the tiled kernel's bits. It only runs
// where the tiled kernel would not split k (LaunchLinearMma decides).
#include <algorithm>

#include "kernels/cuda/common.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/linear_pieces.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/quant/scalar.h"

namespace nw::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTk = 64;            // inputs a staged x tile
constexpr int kXStride = kTk + 8;  // floats a staged x row (== 8 mod 32: float2 reads
                                   // conflict-free)
constexpr int kNt = 16;            // n8 tiles a warp at most
constexpr int64_t kMaxOut = 2 * kNt * 8 * (kWarps / 2);  // 512: the 2-row-warp layout
// From this many rows a dense product goes resident under kAuto. Measured on the H200 (perf mode,
// W-resident over tiled): 1.16x / 1.05x / 1.06x at 32,768 rows for 256->128, 128->512 and
// 256->256, but 0.69x / 0.86x / 0.97x at 8,192 (each block loads all of W for a few tiles).
constexpr int64_t kMinRows = 16384;

// The layout of kRowWarps warps along a tile's rows.
template <int kRowWarps>
struct Layout {
  static constexpr int kColWarps = kWarps / kRowWarps;
  static constexpr int kRows = 16 * kRowWarps;  // a row tile
  // Staging buffers: with W resident one block fits an SM, so the loads in flight come from the
  // staging depth: four 128- or 64-row buffers (three in flight), eight of 32 rows (seven).
  static constexpr int kStages = kRowWarps == 2 ? 8 : 4;
  static constexpr int kOutAlign = 16 * kColWarps;  // each warp an even number of n8 tiles
};

struct Shape {
  int out_pad = 0;   // outputs rounded up to the layout's kOutAlign
  int in_pad = 0;    // inputs rounded up to kTk (staged W row width)
  int in_steps = 0;  // inputs rounded up to 32, the tiled kernel's k range: k16 steps below it
  int w_stride = 0;  // bf16 a staged W row: in_pad + 8 (rows 16 bytes apart mod 128: ldmatrix
                     // conflict-free)
  size_t smem = 0;   // W pieces + x stages
};

// The layout a product's outputs take: 8, 4 or 2 warps along the rows.
int RowWarpsFor(int64_t out) { return out <= 128 ? 8 : out <= 256 ? 4 : 2; }

template <int kRowWarps>
Shape ShapeOf(const LinearParams& p, int w_parts) {
  using L = Layout<kRowWarps>;
  Shape s;
  s.out_pad = static_cast<int>((p.out + L::kOutAlign - 1) / L::kOutAlign * L::kOutAlign);
  s.in_pad = static_cast<int>((p.in + kTk - 1) / kTk * kTk);
  s.in_steps = static_cast<int>((p.in + 31) / 32 * 32);
  s.w_stride = s.in_pad + 8;
  s.smem = sizeof(uint16_t) * w_parts * s.out_pad * s.w_stride +
           sizeof(float) * L::kStages * L::kRows * kXStride;
  return s;
}

Shape ShapeFor(const LinearParams& p, int w_parts) {
  switch (RowWarpsFor(p.out)) {
    case 8:
      return ShapeOf<8>(p, w_parts);
    case 4:
      return ShapeOf<4>(p, w_parts);
    default:
      return ShapeOf<2>(p, w_parts);
  }
}

// A place in a block's sequence of (row tile, k tile) steps and its staging buffer, moved on
// without divisions (64-bit ones cost more than a step's MMAs).
template <int kStages>
struct Cursor {
  int64_t row0;  // the tile's first row
  int k0;        // the k tile's first input
  int buf;       // its staging buffer
  __device__ __forceinline__ void Advance(int in_pad, int64_t row_step) {
    k0 += kTk;
    if (k0 == in_pad) {
      k0 = 0;
      row0 += row_step;
    }
    buf = (buf + 1) % kStages;
  }
};

template <int kXParts, int kWParts, int kRowWarps>
__global__ void __launch_bounds__(kThreads) LinearResidentKernel(LinearParams p, Shape shape) {
  using L = Layout<kRowWarps>;
  constexpr int kTm = L::kRows, kStages = L::kStages;
  extern __shared__ uint4 smem_raw[];
  uint16_t* sw = reinterpret_cast<uint16_t*>(smem_raw);
  float* sx = reinterpret_cast<float*>(sw + static_cast<size_t>(kWParts) * shape.out_pad *
                                                shape.w_stride);  // 16-byte aligned: out_pad % 64
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int64_t b = blockIdx.z;
  const float* x = p.x + b * p.x_batch_stride;
  const uint16_t* w = p.w_bf16 + b * p.w_batch_stride;
  float* y = p.y + b * p.y_batch_stride;
  const int ws = shape.w_stride;

  // All of W, each piece, zero past out and in (in % 8 == 0: a 16-byte piece is wholly inside).
  {
    const int per_row = shape.in_pad / 8, per_part = shape.out_pad * per_row;
    for (int i = tid; i < kWParts * per_part; i += kThreads) {
      const int part = i / per_part, o = (i % per_part) / per_row, k = (i % per_row) * 8;
      const bool ok = o < p.out && k < p.in;
      CpAsync16(sw + (part * shape.out_pad + o) * ws + k,
                ok ? w + part * p.w_piece_stride + static_cast<int64_t>(o) * p.in + k : p.w_bf16,
                ok);
    }
    CpAsyncCommit();
  }

  const int64_t row_tiles = (p.rows + kTm - 1) / kTm;
  const int64_t first = blockIdx.x, stride = gridDim.x;
  const int64_t my_tiles = first < row_tiles ? (row_tiles - first + stride - 1) / stride : 0;
  const int64_t steps = my_tiles * (shape.in_pad / kTk);  // (tile, k tile) pairs, one pipeline
  // x tile: kTm rows x 64 floats in 16-byte pieces, kTm / 16 a thread (the same row and input
  // offsets in every tile).
  constexpr int kPieces = kTm * kTk / 4 / kThreads;
  int piece_row[kPieces], piece_k[kPieces];
#pragma unroll
  for (int c = 0; c < kPieces; ++c) {
    piece_row[c] = (tid + c * kThreads) / (kTk / 4);
    piece_k[c] = ((tid + c * kThreads) % (kTk / 4)) * 4;
  }
  auto stage = [&](const Cursor<kStages>& at) {
    float* st = sx + at.buf * (kTm * kXStride);
#pragma unroll
    for (int c = 0; c < kPieces; ++c) {
      const int64_t row = at.row0 + piece_row[c];
      const int k = at.k0 + piece_k[c];
      const bool ok = row < p.rows && k < p.in;
      CpAsync16(st + piece_row[c] * kXStride + piece_k[c], ok ? x + row * p.x_stride + k : p.x, ok);
    }
  };
  Cursor<kStages> issue{first * kTm, 0, 0}, comp = issue;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) {
      stage(issue);
      issue.Advance(shape.in_pad, stride * kTm);
    }
    CpAsyncCommit();  // one group a step, empty ones included: the wait below counts them
  }

  const int wr = (warp % kRowWarps) * 16;
  const int nts = shape.out_pad / (8 * L::kColWarps);  // n8 tiles of this warp (even, <= kNt)
  const int wc = (warp / kRowWarps) * nts * 8;
  float acc[kNt][4];
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;

  for (int64_t step = 0; step < steps; ++step) {
    CpAsyncWait<kStages - 2>();  // this thread's copies of this step (and of W) have landed
    __syncthreads();             // everyone's; and the previous step's buffer is free again
    if (step + kStages - 1 < steps) {
      stage(issue);
      issue.Advance(shape.in_pad, stride * kTm);
    }
    CpAsyncCommit();
    const int k0 = comp.k0;
    const float* st = sx + comp.buf * (kTm * kXStride);
#pragma unroll
    for (int s = 0; s < kTk / 16; ++s) {
      const int k16 = k0 + s * 16;
      if (k16 >= shape.in_steps) break;  // past the tiled kernel's last k tile (uniform)
      uint32_t a[kXParts][4];
      LoadAFragments<kXParts, kXStride>(st + (wr + g) * kXStride + s * 16 + 2 * t4, a);
#pragma unroll
      for (int wpart = kWParts - 1; wpart >= 0; --wpart) {
        const uint16_t* wbase = sw + (wpart * shape.out_pad + wc) * ws + k16;
#pragma unroll
        for (int q = 0; q < kNt / 2; ++q) {
          if (2 * q >= nts) break;
          const int mi = lane >> 3;  // matrix: n8 tile 2 q + mi / 2, k half mi % 2
          uint32_t r[4];
          LdMatrixX4(r, wbase + ((2 * q + (mi >> 1)) * 8 + (lane & 7)) * ws + (mi & 1) * 8);
#pragma unroll
          for (int xpart = kXParts - 1; xpart >= 0; --xpart) {
            MmaBf16(acc[2 * q], a[xpart], r[0], r[1]);
          }
#pragma unroll
          for (int xpart = kXParts - 1; xpart >= 0; --xpart) {
            MmaBf16(acc[2 * q + 1], a[xpart], r[2], r[3]);
          }
        }
      }
    }
    // After a tile's last k step: write its outputs and start the next tile's sums. C fragment:
    // rows g and g + 8 of the warp's 16, outputs 2 t4 and 2 t4 + 1 of each n8 tile.
    const int64_t row0 = comp.row0;
    const bool tile_done = comp.k0 + kTk == shape.in_pad;
    comp.Advance(shape.in_pad, stride * kTm);
    if (!tile_done) continue;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = row0 + wr + g + 8 * half;
      float* yr = y + row * p.y_stride;
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
        if (nt >= nts) break;
        const int64_t o = wc + nt * 8 + 2 * t4;
        float v0 = acc[nt][2 * half], v1 = acc[nt][2 * half + 1];
        if (p.round_bf16) {
          v0 = quant::RoundBf16(v0);
          v1 = quant::RoundBf16(v1);
        }
        if (row < p.rows) {
          if (o < p.out) yr[o] = v0;
          if (o + 1 < p.out) yr[o + 1] = v1;
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
  }
  CpAsyncWait<0>();  // the trailing empty groups
}

template <int kXParts, int kWParts, int kRowWarps>
Status LaunchWith(const LinearParams& p, cudaStream_t stream) {
  const Shape shape = ShapeOf<kRowWarps>(p, kWParts);
  void (*kernel)(LinearParams, Shape) = LinearResidentKernel<kXParts, kWParts, kRowWarps>;
  NW_RETURN_IF_ERROR(AllowDynamicSharedMemory(reinterpret_cast<const void*>(kernel), shape.smem,
                                              "LinearResidentKernel"));
  int per_sm = 0;
  NW_CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, shape.smem));
  constexpr int kTm = Layout<kRowWarps>::kRows;
  const int64_t row_tiles = (p.rows + kTm - 1) / kTm;
  const int64_t resident = std::max<int64_t>(1, int64_t{per_sm} * MultiprocessorCount());
  const int64_t per_batch = std::max<int64_t>(1, resident / p.batches);
  const dim3 grid(static_cast<unsigned>(std::min(row_tiles, per_batch)), 1,
                  static_cast<unsigned>(p.batches));
  kernel<<<grid, kThreads, shape.smem, stream>>>(p, shape);
  return NW_CUDA_LAUNCH_STATUS("LinearResidentKernel");
}

template <int kXParts, int kWParts>
Status LaunchAs(const LinearParams& p, cudaStream_t stream) {
  switch (RowWarpsFor(p.out)) {
    case 8:
      return LaunchWith<kXParts, kWParts, 8>(p, stream);
    case 4:
      return LaunchWith<kXParts, kWParts, 4>(p, stream);
    default:
      return LaunchWith<kXParts, kWParts, 2>(p, stream);
  }
}

}  // namespace

bool LinearResidentApplies(const LinearParams& p) {
  if (p.row_index != nullptr || p.out > kMaxOut || p.mma_kernel == LinearMmaKernel::kTiled) {
    return false;
  }
  if (p.mma_kernel == LinearMmaKernel::kAuto && p.rows < kMinRows) return false;
  const int w_parts = p.w_pieces == 3 ? 3 : 1;
  // cp.async: every x and W row, of every batch and piece, starts 16-byte aligned.
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  if (p.in % 8 != 0 || p.x_stride % 4 != 0 || !aligned(p.x) || !aligned(p.w_bf16) ||
      (p.batches > 1 && (p.x_batch_stride % 4 != 0 || p.w_batch_stride % 8 != 0)) ||
      (w_parts == 3 && p.w_piece_stride % 8 != 0)) {
    return false;
  }
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return ShapeFor(p, w_parts).smem <= static_cast<size_t>(optin);
}

// Called by LaunchLinearMma for a product LinearResidentApplies accepted.
Status LaunchLinearResident(const LinearParams& p, cudaStream_t stream) {
  if (p.x_split) return LaunchAs<3, 1>(p, stream);
  if (p.w_pieces == 3) return LaunchAs<1, 3>(p, stream);
  return LaunchAs<1, 1>(p, stream);
}

}  // namespace nw::cuda::detail
