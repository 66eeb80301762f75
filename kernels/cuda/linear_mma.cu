// Linear layers on tensor cores (see linear.h, LinearParams::w_bf16): y = x W^T with x rounded to
// bf16 (or split into three bf16 pieces that sum to it exactly), the bf16 copy of W (one piece,
// or three that sum to W exactly), mma.sync m16n8k16 and fp32 accumulation. The three shapes of
// the exact kernel (dense, batched, gathered): a block computes a 32-row x
// 64-output tile with four warps, warp w rows 16 (w % 2) .. +15 and outputs 32 (w / 2) .. +31
// (four n8 tiles), over 32-wide k tiles.
// Every product of two bf16 values is exact in fp32; the summation order is the tensor cores',
// fixed for a shape, so results are deterministic run to run.
// Staging: k tiles go through Stages() shared-memory buffers (three with one W piece, two with
// three: under the 48 KB a block gets without opting in, and room for seven blocks an SM), x as
// fp32 and W as bf16 pieces. When every row of x and W starts 16-byte aligned, cp.async brings
// tiles Stages() - 1 ahead of the MMAs (zero-filled past the edges), so the loads of later tiles
// fly while this one's run; otherwise a tile is staged element by element, in the same buffers. The
// A fragments are rounded (or split) from the fp32 tile as they are loaded. Split k: a dense
// product whose tiles would leave most multiprocessors idle (few rows, or few outputs over a long
// k: the mHC mixing linear, 24 outputs over 1,024 inputs) splits k into up to kMaxSplits ranges,
// one grid z each, writing fp32 partial tiles; a second kernel adds them in range order
// (deterministic) and applies the output rounding.
#include <algorithm>
#include <cstring>

#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/linear_pieces.cuh"
#include "kernels/cuda/linear_tile.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/quant/scalar.h"

namespace nw::cuda::detail {

bool LinearResidentApplies(const LinearParams& p);                        // linear_mma_resident.cu
Status LaunchLinearResident(const LinearParams& p, cudaStream_t stream);  // linear_mma_resident.cu

namespace {

constexpr int kThreads = 128;
constexpr int kTm = kLinearTileRows;  // 32 rows per tile (the gathered tiles' height)
constexpr int kTn = 64;               // outputs per tile
constexpr int kTk = 32;               // k per staged tile
constexpr int kXStride = kTk + 8;     // floats per staged x row: conflict-free float2 reads
constexpr int kWStride = kTk + 8;     // bf16 per staged W row: conflict-free fragment loads

constexpr int kMaxSplits = 8;
constexpr int64_t kMinSplitK = 256;  // k per range at least

// Split k (count > 1; dense, batches 1): grid z = range z of `chunk` inputs, written to
// partial[z][rows][out].
struct SplitK {
  int count = 1;
  int64_t chunk = 0;
  float* partial = nullptr;
};

// One stage's buffers.
template <int kWParts>
struct Stage {
  float x[kTm * kXStride];
  uint16_t w[kWParts][kTn * kWStride];
};

// Buffers: a tile being computed, the rest on their way.
template <int kWParts>
constexpr int Stages() {
  return kWParts == 1 ? 3 : 2;
}
template <int kWParts>
constexpr size_t SmemBytes() {
  return sizeof(Stage<kWParts>) * Stages<kWParts>();
}
static_assert(SmemBytes<1>() <= 48 * 1024 && SmemBytes<3>() <= 48 * 1024,
              "the linear kernels launch without opting in to more shared memory");

// What a thread stages of every k tile: 16-byte pieces of x rows (4 floats) and of W rows (8
// bf16), the same rows and k offsets in each tile, so the sources are found once per block.
template <int kWParts>
struct TileCopies {
  static constexpr int kX = kTm * (kTk / 4) / kThreads;  // x pieces a thread copies
  static constexpr int kW = kTn * (kTk / 8) / kThreads;  // W pieces of each W piece
  static_assert(kThreads % (kTk / 4) == 0 && kThreads % (kTk / 8) == 0);
  const float* x_src[kX];     // the row's x at this thread's k offset, null past the rows
  const uint16_t* w_src[kW];  // the output's W row at this thread's k offset, null past out
  int x_kk, w_kk;             // the k offsets within a tile

  __device__ __forceinline__ TileCopies(const LinearParams& p, const float* x, const uint16_t* w,
                                        const int32_t* xrow, int64_t o0, int tid) {
    x_kk = (tid % (kTk / 4)) * 4;
    w_kk = (tid % (kTk / 8)) * 8;
#pragma unroll
    for (int j = 0; j < kX; ++j) {
      const int32_t xr = xrow[XRow(tid, j)];
      x_src[j] = xr >= 0 ? x + static_cast<int64_t>(xr) * p.x_stride + x_kk : nullptr;
    }
#pragma unroll
    for (int j = 0; j < kW; ++j) {
      const int64_t o = o0 + WRow(tid, j);
      w_src[j] = o < p.out ? w + o * p.in + w_kk : nullptr;
    }
  }
  static __device__ __forceinline__ int XRow(int tid, int j) {
    return (tid + j * kThreads) / (kTk / 4);
  }
  static __device__ __forceinline__ int WRow(int tid, int j) {
    return (tid + j * kThreads) / (kTk / 8);
  }

  // Starts the copies of k tile [k0, k0 + kTk) into `st`, zero-filled past the edges (in % 8 ==
  // 0: a piece is wholly inside k_end or wholly past it).
  __device__ __forceinline__ void Start(const LinearParams& p, int64_t k0, int64_t k_end,
                                        Stage<kWParts>& st, int tid) const {
    const bool x_in = k0 + x_kk < k_end, w_in = k0 + w_kk < k_end;
#pragma unroll
    for (int j = 0; j < kX; ++j) {
      const bool ok = x_in && x_src[j] != nullptr;
      CpAsync16(st.x + XRow(tid, j) * kXStride + x_kk, ok ? x_src[j] + k0 : p.x, ok);
    }
#pragma unroll
    for (int part = 0; part < kWParts; ++part) {
#pragma unroll
      for (int j = 0; j < kW; ++j) {
        const bool ok = w_in && w_src[j] != nullptr;
        CpAsync16(st.w[part] + WRow(tid, j) * kWStride + w_kk,
                  ok ? w_src[j] + part * p.w_piece_stride + k0 : p.w_bf16, ok);
      }
    }
  }
};

// Stages k tile [k0, k0 + kTk) element by element (rows not 16-byte aligned), zeros past the
// edges.
template <int kWParts>
__device__ __forceinline__ void StageTileScalar(const LinearParams& p, const float* x,
                                                const uint16_t* w, const int32_t* xrow, int64_t o0,
                                                int64_t k0, int64_t k_end, Stage<kWParts>& st,
                                                int tid) {
  for (int c = tid; c < kTm * kTk; c += kThreads) {
    const int r = c / kTk, kk = c % kTk;
    const int32_t xr = xrow[r];
    st.x[r * kXStride + kk] =
        (xr >= 0 && k0 + kk < k_end) ? x[static_cast<int64_t>(xr) * p.x_stride + k0 + kk] : 0.0f;
  }
#pragma unroll 1
  for (int part = 0; part < kWParts; ++part) {
    const uint16_t* wp = w + part * p.w_piece_stride;
    for (int c = tid; c < kTn * kTk; c += kThreads) {
      const int o = c / kTk, kk = c % kTk;
      st.w[part][o * kWStride + kk] =
          (o0 + o < p.out && k0 + kk < k_end) ? wp[(o0 + o) * p.in + k0 + kk] : uint16_t{0};
    }
  }
}

template <int kXParts, int kWParts>
__global__ void __launch_bounds__(kThreads) LinearMmaKernel(LinearParams p, SplitK split) {
  constexpr int kStages = Stages<kWParts>();
  extern __shared__ uint4 smem_raw[];
  Stage<kWParts>* stages = reinterpret_cast<Stage<kWParts>*>(smem_raw);
  __shared__ int32_t xrow[kTm];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  // grid x = row tiles x output tiles, output tiles fastest: the blocks that read the same x rows
  // run together, so each x tile comes from DRAM once.
  const int64_t out_tiles = (p.out + kTn - 1) / kTn;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x % out_tiles) * kTn;
  const int64_t row_tile = blockIdx.x / out_tiles;

  int64_t k_begin = 0, k_end = p.in;
  if (split.count > 1) {
    k_begin = static_cast<int64_t>(blockIdx.z) * split.chunk;
    k_end = min(p.in, k_begin + split.chunk);
    p.y = split.partial + static_cast<int64_t>(blockIdx.z) * p.rows * p.out;
    p.y_stride = p.out;
    p.batches = 1;
    p.x_batch_stride = p.w_batch_stride = p.y_batch_stride = 0;  // z is the range, not a batch
    p.round_bf16 = false;
  }
  LinearTile<uint16_t> tile;
  if (!SetUpLinearTile<kTm>(p, p.w_bf16, row_tile, xrow, &tile)) return;
  const float* x = tile.x;
  const uint16_t* w = tile.w;
  float* y = tile.y;
  const int64_t row0 = tile.row0;

  // cp.async when every row starts 16-byte aligned (x: 4 floats, w: 8 bf16).
  const bool async =
      p.in % 8 == 0 && p.x_stride % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(w) % 16 == 0 && (kWParts == 1 || p.w_piece_stride % 8 == 0);
  const int wr = (warp & 1) * 16, wc = (warp >> 1) * 32;
  float acc[4][4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;

  const int64_t tiles = (k_end - k_begin + kTk - 1) / kTk;
  const TileCopies<kWParts> copies(p, x, w, xrow, o0, tid);
  auto stage = [&](int64_t tile_index) {
    const int64_t k0 = k_begin + tile_index * kTk;
    Stage<kWParts>& st = stages[tile_index % kStages];
    if (async) {
      copies.Start(p, k0, k_end, st, tid);
    } else {
      StageTileScalar<kWParts>(p, x, w, xrow, o0, k0, k_end, st, tid);
    }
  };
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) {
    if (t < tiles) stage(t);
    CpAsyncCommit();  // one group a tile, empty ones included: the wait below counts them
  }
  for (int64_t t = 0; t < tiles; ++t) {
    CpAsyncWait<kStages - 2>();  // this thread's copies of tile t have landed
    __syncthreads();             // everyone's; and tile t - 1's buffer is free again
    {
      const int64_t ahead = t + kStages - 1;
      if (ahead < tiles) stage(ahead);
      CpAsyncCommit();
    }
    const Stage<kWParts>& st = stages[t % kStages];
#pragma unroll
    for (int s = 0; s < kTk / 16; ++s) {
      uint32_t a[kXParts][4];  // the A fragment of each x piece
      LoadAFragments<kXParts, kXStride>(st.x + (wr + g) * kXStride + s * 16 + 2 * t4, a);
      // Smallest pieces first; each n8 tile's products in the same order as ever.
#pragma unroll
      for (int wpart = kWParts - 1; wpart >= 0; --wpart) {
        uint32_t b[4][2];  // B fragments of the four n8 tiles, two ldmatrix.x4
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const int mi = lane >> 3;  // matrix: n8 tile 2 q + mi / 2, k half mi % 2
          uint32_t r[4];
          LdMatrixX4(r, st.w[wpart] + (wc + (2 * q + (mi >> 1)) * 8 + (lane & 7)) * kWStride +
                            s * 16 + (mi & 1) * 8);
          b[2 * q][0] = r[0];
          b[2 * q][1] = r[1];
          b[2 * q + 1][0] = r[2];
          b[2 * q + 1][1] = r[3];
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
          for (int xpart = kXParts - 1; xpart >= 0; --xpart) {
            MmaBf16(acc[nt], a[xpart], b[nt][0], b[nt][1]);
          }
        }
      }
    }
  }
  CpAsyncWait<0>();  // the trailing empty groups

  // C fragment: rows g and g + 8 of the warp's 16, outputs 2 t4 and 2 t4 + 1 of each n8 tile.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = wr + g + 8 * half;
    if (xrow[r] < 0) continue;
    float* yr = y + (row0 + r) * p.y_stride;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int64_t o = o0 + wc + nt * 8 + 2 * t4;
      float v0 = acc[nt][2 * half], v1 = acc[nt][2 * half + 1];
      if (p.round_bf16) {
        v0 = quant::RoundBf16(v0);
        v1 = quant::RoundBf16(v1);
      }
      if (o < p.out) yr[o] = v0;
      if (o + 1 < p.out) yr[o + 1] = v1;
    }
  }
}

// y[r, o] = sum over ranges z in order of partial[z][r][o], rounded when asked.
__global__ void LinearSplitSumKernel(LinearParams p, SplitK split) {
  const int64_t total = p.rows * p.out;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = split.partial[i];
    for (int z = 1; z < split.count; ++z) v += split.partial[z * total + i];
    if (p.round_bf16) v = quant::RoundBf16(v);
    p.y[(i / p.out) * p.y_stride + i % p.out] = v;
  }
}

template <int kXParts, int kWParts>
Status LaunchAs(const LinearParams& p, cudaStream_t stream) {
  const bool gathered = p.row_index != nullptr;
  const int64_t row_tiles = gathered ? p.max_tiles : (p.rows + kTm - 1) / kTm;
  const int64_t out_tiles = (p.out + kTn - 1) / kTn;
  SplitK split;
  const int64_t blocks = row_tiles * out_tiles * p.batches;
  const int64_t want = 4LL * MultiprocessorCount();
  if (!gathered && p.batches == 1 && blocks < want && p.in >= 2 * kMinSplitK) {
    const int64_t by_k = p.in / kMinSplitK;
    split.count =
        static_cast<int>(std::min<int64_t>({kMaxSplits, by_k, (want + blocks - 1) / blocks}));
  }
  if (split.count > 1) {
    split.chunk = (p.in + split.count - 1) / split.count;
    split.chunk = (split.chunk + kTk - 1) / kTk * kTk;
    split.count = static_cast<int>((p.in + split.chunk - 1) / split.chunk);
  }
  constexpr size_t smem = SmemBytes<kWParts>();
  if (split.count <= 1 && LinearResidentApplies(p)) return LaunchLinearResident(p, stream);
  if (split.count <= 1) {
    const dim3 grid(static_cast<unsigned>(row_tiles * out_tiles), 1,
                    static_cast<unsigned>(p.batches));
    LinearMmaKernel<kXParts, kWParts><<<grid, kThreads, smem, stream>>>(p, SplitK{});
    return NW_CUDA_LAUNCH_STATUS("LinearMmaKernel");
  }
  const int64_t partial_floats = split.count * p.rows * p.out;
  DeviceBuffer<float> partial;
  if (p.split_workspace != nullptr && partial_floats <= p.split_workspace_floats) {
    split.partial = p.split_workspace;
  } else {
    NW_ASSIGN_OR_RETURN(
        partial, DeviceBuffer<float>::AllocateOn(static_cast<size_t>(partial_floats), stream));
    split.partial = partial.data();
  }
  const dim3 grid(static_cast<unsigned>(row_tiles * out_tiles), 1,
                  static_cast<unsigned>(split.count));
  LinearMmaKernel<kXParts, kWParts><<<grid, kThreads, smem, stream>>>(p, split);
  NW_RETURN_IF_ERROR(NW_CUDA_LAUNCH_STATUS("LinearMmaKernel (split k)"));
  const int64_t total = p.rows * p.out;
  LinearSplitSumKernel<<<static_cast<unsigned>(std::clamp<int64_t>((total + 255) / 256, 1, want)),
                         256, 0, stream>>>(p, split);
  return NW_CUDA_LAUNCH_STATUS("LinearSplitSumKernel");
}

}  // namespace

// Called by LaunchLinear after it checked the shared parameters and filled the strides.
Status LaunchLinearMma(const LinearParams& p, cudaStream_t stream) {
  if (p.w_pieces != 1 && p.w_pieces != 3) {
    return Status::InvalidArgument("Linear: w_pieces must be 1 or 3");
  }
  if (p.w_pieces == 3 && p.w_piece_stride <= 0) {
    return Status::InvalidArgument("Linear: three weight pieces need w_piece_stride");
  }
  if (p.x_split && p.w_pieces == 3) {
    return Status::InvalidArgument(
        "Linear: x_split with three weight pieces is not supported (nine products a pair)");
  }
  if (p.mma_kernel == LinearMmaKernel::kResident) {
    if (!LinearResidentApplies(p)) {
      return Status::InvalidArgument(
          "Linear: the W-resident kernel needs a dense or batched product, out <= 512, x and W "
          "rows 16-byte aligned, and W within the device's shared memory");
    }
    return LaunchLinearResident(p, stream);
  }
  if (p.x_split) return LaunchAs<3, 1>(p, stream);
  return p.w_pieces == 3 ? LaunchAs<1, 3>(p, stream) : LaunchAs<1, 1>(p, stream);
}

}  // namespace nw::cuda::detail

namespace nw::cuda {

// A split product has fewer than `want` = 4 x SMs blocks of kTm x kTn outputs and at most
// ceil(want / blocks) ranges, so its partial outputs (ranges x rows x out) stay under
// (want + blocks) x kTm x kTn < 2 x want x kTm x kTn floats.
int64_t LinearSplitWorkspaceFloats() {
  return 2 * 4LL * MultiprocessorCount() * detail::kTm * detail::kTn;
}

}  // namespace nw::cuda
