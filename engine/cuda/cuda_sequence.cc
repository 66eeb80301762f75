#include "engine/cuda/cuda_sequence.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "engine/cuda/forward_graphs.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/compress.h"
#include "kernels/cuda/indexer.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/mhc.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/quant.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/sequence_ops.h"
#include "kernels/cuda/topk.h"

namespace nw::cuda {

namespace {

constexpr int kPageSize = 64;
// Indexer logits of one query block are kept under this many floats (256 MiB).
constexpr int64_t kMaxScoreFloats = int64_t{64} << 20;

// Buffers of a sequence are stream-ordered on the sequence's stream (DeviceBuffer::AllocateOn): a
// buffer replaced here while kernels that read it are still queued is freed after them.
template <typename T>
Status Grow(DeviceBuffer<T>& b, int64_t count, cudaStream_t stream) {
  if (count <= static_cast<int64_t>(b.size())) return Status::Ok();
  NW_ASSIGN_OR_RETURN(
      b, DeviceBuffer<T>::AllocateOn(static_cast<size_t>(std::max<int64_t>(count, 1)), stream));
  return Status::Ok();
}

template <typename T>
Status Upload(DeviceBuffer<T>& b, const std::vector<T>& v, cudaStream_t stream) {
  NW_RETURN_IF_ERROR(Grow(b, static_cast<int64_t>(v.size()), stream));
  if (v.empty()) return Status::Ok();
  NW_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(b.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
  return Status::Ok();
}

template <typename T>
Status Download(const T* src, size_t n, std::vector<T>* out, cudaStream_t stream) {
  out->resize(n);
  if (n == 0) return Status::Ok();
  NW_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(out->data(), src, n * sizeof(T), cudaMemcpyDeviceToHost, stream));
  NW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return Status::Ok();
}

Status CopyD2D(float* dst, const float* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return Status::Ok();
  NW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float),
                                          cudaMemcpyDeviceToDevice, stream));
  return Status::Ok();
}

// A store of rows: one contiguous buffer, or pages of a shared pool through a page table. The
// compressed KV's store keeps a bf16 copy of every row too (same rows, same page mapping) when
// its values are bf16 values (bf16 activations, KV rounded): the attention reads that copy, half
// the bytes of the fp32 rows, and ExportState the fp32 rows.
struct RowStore {
  int64_t width = 0;
  DevTensor contiguous;                      // [capacity, width]
  DeviceBuffer<uint16_t> contiguous16;       // its bf16 copy, when kept
  DevTensor* pool = nullptr;                 // paged: the pool ([pages * 64, width])
  DeviceBuffer<uint16_t>* pool16 = nullptr;  // paged: the pool's bf16 copy, when kept
  int* next_page = nullptr;                  // paged: the pool's next free page
  int64_t pool_pages = 0;
  std::vector<int32_t> pages;  // paged: logical page -> physical page
  DeviceBuffer<int32_t> pages_dev;

  bool paged() const { return pool != nullptr; }
  float* base() { return paged() ? pool->data() : contiguous.data(); }
  const float* base() const { return paged() ? pool->data() : contiguous.data(); }
  // The bf16 copy's rows (null when none is kept).
  uint16_t* base16() {
    if (paged()) return pool16 != nullptr ? pool16->data() : nullptr;
    return contiguous16.size() > 0 ? contiguous16.data() : nullptr;
  }
  int64_t rows() const {
    return paged() ? pool_pages * kPageSize : static_cast<int64_t>(contiguous.size()) / width;
  }
  const int32_t* table() const { return paged() ? pages_dev.data() : nullptr; }
  int64_t Row(int64_t i) const {
    return paged() ? int64_t{pages[static_cast<size_t>(i / kPageSize)]} * kPageSize + i % kPageSize
                   : i;
  }
  // Maps pages for entries [0, entries).
  Status Reserve(int64_t entries, cudaStream_t stream) {
    if (!paged()) return Status::Ok();
    const int64_t need = (entries + kPageSize - 1) / kPageSize;
    if (need <= static_cast<int64_t>(pages.size())) return Status::Ok();
    const size_t first = pages.size();
    while (static_cast<int64_t>(pages.size()) < need) {
      if (*next_page >= pool_pages) {
        return Status::ResourceExhausted("the page pool of the sequence is full");
      }
      pages.push_back((*next_page)++);
    }
    NW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(pages_dev.data() + first, pages.data() + first,
                                            (pages.size() - first) * sizeof(int32_t),
                                            cudaMemcpyHostToDevice, stream));
    return cudaStreamSynchronize(stream) == cudaSuccess
               ? Status::Ok()
               : Status::Internal("page table upload failed");
  }
  // Stores n rows of `width` values (device memory, row-major) as entries first_entry ..,
  // mapping their pages first, with the bf16 copy when one is kept.
  Status Store(const float* src, int64_t first_entry, int64_t n, cudaStream_t stream) {
    NW_RETURN_IF_ERROR(Reserve(first_entry + n, stream));
    StoreRowsParams sr;
    sr.src = src;
    sr.dst = base();
    sr.dst_bf16 = base16();
    sr.pages = table();
    sr.page_size = kPageSize;
    sr.first_entry = first_entry;
    sr.n = n;
    sr.dim = width;
    return LaunchStoreRows(sr, stream);
  }
};

// A compressor's projections of its last `span` tokens, oldest first.
struct CompState {
  int64_t span = 0;
  int64_t width = 0;
  DevTensor kv, score;  // [span, width]
};

struct LayerState {
  int ratio = 0;
  DevTensor ring;  // [W, d]
  RowStore comp;   // compressed KV (ratio > 0)
  RowStore ikeys;  // index keys (ratio 4)
  CompState kv_state, ix_state;
  int probe_slot = -1;
};

Status Act(const PrecisionProfile& prof, float* x, int64_t rows, int64_t cols,
           cudaStream_t stream) {
  if (prof.activations != NumFormat::kBf16 || rows == 0) return Status::Ok();
  FakeQuantParams q;
  q.x = x;
  q.y = x;
  q.rows = rows;
  q.cols = static_cast<int>(cols);
  q.format = QuantFormat::kBf16;
  return LaunchFakeQuant(q, stream);
}

Status IndexFormat(NumFormat f, float* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (f == NumFormat::kFp32 || rows == 0) return Status::Ok();
  FakeQuantParams q;
  q.x = x;
  q.y = x;
  q.rows = rows;
  q.cols = static_cast<int>(cols);
  switch (f) {
    case NumFormat::kBf16:
      q.format = QuantFormat::kBf16;
      break;
    case NumFormat::kFp8:
      q.format = QuantFormat::kFp8;
      q.fp8_block = 128;
      break;
    case NumFormat::kMxfp4:
      q.format = QuantFormat::kMxfp4;
      break;
    case NumFormat::kNvfp4:
      q.format = QuantFormat::kNvfp4;
      break;
    default:
      return Status::Ok();
  }
  return LaunchFakeQuant(q, stream);
}

// True when every index q and k value of the profile is exactly a bf16 value (bf16, and e4m3 or
// e2m1 codes times a power-of-two scale): the indexer then runs on tensor cores with exact
// products (kernels/cuda/indexer.h kBf16), only the fp32 summation order differing from the CPU.
// fp32 keeps the exact SIMT path (the CPU's bits); NVFP4 rows carry an arbitrary fp32 factor.
bool BF16ExactIndexFormat(NumFormat f) {
  return f == NumFormat::kBf16 || f == NumFormat::kFp8 || f == NumFormat::kMxfp4;
}
bool IndexerOnTensorCores(const PrecisionProfile& p) {
  return BF16ExactIndexFormat(p.index_q) && BF16ExactIndexFormat(p.index_k);
}

// True when the attention's queries and KV rows hold bf16 values: bf16 activations, and KV
// rounded to bf16 or to V4's fp8 layout (e4m3 codes times power-of-two scales, rope dims in
// bf16; exact in bf16 unless a 64-value block's largest magnitude is below 2^-118, which RMS-
// normed KV rows do not reach). The sequence then keeps bf16 copies of the KV rows for the
// attention (half the bytes read; kernels/cuda/attention.h "few heads, bf16 values").
bool KvBf16Copy(const PrecisionProfile& p) {
  return p.activations == NumFormat::kBf16 && p.kv != NumFormat::kFp32;
}

}  // namespace

struct CudaSequence::Impl {
  const ModelConfig& cfg;
  const DeviceModel& m;
  const DeviceRope& rope;
  KvLayout layout;
  int64_t prefill_chunk;
  SequenceSpec spec;
  cudaStream_t stream;
  int topk = 0;
  bool act_bf16 = false;
  int64_t pos = 0;
  // The indexer's key end of each query of the current chunk (`visible` on the device): (p + 1)
  // / 4, or the chunk's last query's under the ragged-key-range fault; and the first selectable
  // key (0, or the chunk's first entry under ragged-key-offset).
  std::vector<int32_t> key_end;
  int64_t key_begin = 0;

  DevTensor kv_pool, idx_pool;
  DeviceBuffer<uint16_t> kv_pool16;  // kv_pool's bf16 copy (kv_bf16_copy)
  int kv_next_page = 0, idx_next_page = 0;
  // The attention reads bf16 copies of the window and the compressed KV (KvBf16Copy).
  bool kv_bf16_copy = false;
  // Checkpoint(): per layer the ring and both compressor states, then the position and probe
  // row counts (-1: no mark).
  std::vector<DevTensor> mark_buffers;
  int64_t mark_pos = -1;
  std::vector<size_t> mark_probe_rows;
  std::vector<LayerState> layers;
  std::vector<IndexerProbe> probes;

  // Scratch, grown to the largest chunk.
  int64_t cap = 0;
  DeviceBuffer<int32_t> tokens, positions, visible, zeros, win_idx, win_len, comp_idx, comp_len,
      sel, experts, offsets, list_token, slot_pos, tile_expert, tile_row0, tile_rows, iota,
      dispatch_scratch;
  DevTensor X, Xn, mix, coeffs, u, xn, y, qr, qh, kvbuf, o, oa, ckv, cscore, ikv, iscore, iq, iw,
      ent, scores, glog, rweights, lweights, g1, g3, Y, sh1, sh3, S, hmix, hu, hn, logits;
  DeviceBuffer<uint16_t> iq16, ikeys16;  // bf16 copies for the tensor-core indexer
  DeviceBuffer<uint16_t> kvbuf16;        // kvbuf's bf16 copy (kv_bf16_copy)
  DeviceBuffer<int32_t> pr_rank;
  DeviceBuffer<uint8_t> pr_hit;
  DevTensor pr_score, pr_kth, pr_next;
  int64_t comp_stride = 0;
  // Positions of compressed entries (entry e of a ratio-r compressor sits at e * r), per ratio.
  std::map<int, DeviceBuffer<int32_t>> entry_positions;
  DevTensor split_ws;  // the tensor-core linears' split-k partial outputs (linear.h)

  // Reuse and graph replay (forward_graphs.h). `epoch` counts reallocations of the buffers a
  // forward's kernels name; while `capturing`, Grow refuses to reallocate (the capture then falls
  // back to direct launches). A sequence whose call failed is not reused (`failed`).
  ForwardGraphs graphs;
  uint64_t epoch = 0;
  bool capturing = false;
  bool failed = false;

  Impl(const ModelConfig& c, const DeviceModel& model, const DeviceRope& r, KvLayout l,
       int64_t chunk, const SequenceSpec& s, cudaStream_t st, size_t graph_capacity)
      : cfg(c),
        m(model),
        rope(r),
        layout(l),
        prefill_chunk(chunk),
        spec(s),
        stream(st),
        graphs(l == KvLayout::kContiguous ? graph_capacity : 0) {}

  // Grows `b` to `count` elements (contents not kept), as the file's Grow, counting the
  // reallocation in `epoch`; refused while a forward is being captured.
  template <typename T>
  Status Grow(DeviceBuffer<T>& b, int64_t count, cudaStream_t st) {
    if (count <= static_cast<int64_t>(b.size())) return Status::Ok();
    if (capturing) return Status::Unavailable("a device buffer would grow during graph capture");
    ++epoch;
    return ::nw::cuda::Grow(b, count, st);
  }
  template <typename T>
  Status Upload(DeviceBuffer<T>& b, const std::vector<T>& v, cudaStream_t st) {
    NW_RETURN_IF_ERROR(Grow(b, static_cast<int64_t>(v.size()), st));
    return ::nw::cuda::Upload(b, v, st);
  }

  Status Init();
  void InitProbes();
  // Makes a used sequence's state a fresh one for `s` (same shape: Compatible): position 0, no
  // checkpoint, fresh probe rows. The buffers and captured graphs stay.
  void Reset(const SequenceSpec& s);
  bool Compatible(KvLayout l, int64_t chunk, const SequenceSpec& s) const;
  // The launches of one chunk (Forward's, after its uploads; no host synchronisation): n tokens
  // from position s, the head over the last `rows` rows into `logits`.
  Status Enqueue(int64_t n, int64_t s, int64_t rows);
  Status EnsureScratch(int64_t n);
  Status Forward(std::span<const int32_t> toks, std::vector<float>* last, std::vector<float>* all);
  Status Attention(int l, int64_t n, int64_t s);
  Status Compress(const DevCompressor& c, bool indexer, const DevTensor& cos, const DevTensor& sin,
                  float* kvp, float* scorep, int64_t n, int64_t s, CompState& state,
                  RowStore& store);
  Status Select(int l, int64_t n, int64_t s);
  Status Moe(int l, int64_t n);
  // Under a bf16-activation profile every linear runs on tensor cores (kernels/cuda/linear.h):
  // x_bf16 says the caller's rows hold bf16 values (rounded by Act, Norm or Rope), otherwise x is
  // split into three exact bf16 pieces; the weight is one bf16 piece or three (not both split: that
  // pair stays on the exact kernel). Every product is exact either way; only the fp32 summation
  // order differs from the CPU.
  void TensorCores(LinearParams& p, const DevTensor& w, bool x_bf16) const {
    if (!act_bf16) return;
    const DeviceModel::Bf16Weight* c = m.Bf16(w);
    if (c == nullptr || (c->pieces == 3 && !x_bf16)) return;  // the exact kernel then
    p.w_bf16 = c->bits.data();
    p.w_pieces = c->pieces;
    p.w_piece_stride = c->piece_stride;
    p.x_split = !x_bf16;
  }
  // round_out: the outputs are an activation rounding point (Act): fused into the tensor-core
  // linear, or a separate pass after the exact one.
  Status Lin(const float* in_rows, int64_t rows, int64_t in, const DevTensor& w, int64_t out,
             float* out_rows, bool x_bf16 = false, bool round_out = false) {
    LinearParams p;
    p.x = in_rows;
    p.w = w.data();
    TensorCores(p, w, x_bf16);
    p.y = out_rows;
    p.rows = rows;
    p.in = in;
    p.out = out;
    p.lanes = 4;
    p.round_bf16 = round_out && act_bf16 && p.w_bf16 != nullptr;
    p.split_workspace = split_ws.data();
    p.split_workspace_floats = static_cast<int64_t>(split_ws.size());
    NW_RETURN_IF_ERROR(LaunchLinear(p, stream));
    if (round_out && !p.round_bf16) return Act(spec.precision, out_rows, rows, out, stream);
    return Status::Ok();
  }
  // RMS norm of x's rows into y (in place when y is x).
  Status Norm(float* x, const float* w, int64_t rows, int64_t cols) {
    return NormInto(x, w, rows, cols, x);
  }
  Status NormInto(const float* x, const float* w, int64_t rows, int64_t cols, float* out) {
    RmsNormParams p;
    p.x = x;
    p.w = w;
    p.y = out;
    p.rows = rows;
    p.cols = static_cast<int>(cols);
    p.eps = static_cast<float>(cfg.norm_eps);
    p.round_bf16 = act_bf16;
    return LaunchRmsNorm(p, stream);
  }
  Status Rope(float* x, int64_t rows, int64_t stride, int offset, int rows_per_position,
              const int32_t* pos_dev, const DevTensor& cos, const DevTensor& sin, bool inverse,
              bool half_split = false) {
    RopeParams p;
    p.x = x;
    p.positions = pos_dev;
    p.cos = cos.data();
    p.sin = sin.data();
    p.rows = rows;
    p.x_stride = stride;
    p.offset = offset;
    p.pairs = cfg.rope_head_dim / 2;
    p.rows_per_position = rows_per_position;
    p.n_positions = spec.max_tokens;
    p.inverse = inverse;
    p.round_bf16 = act_bf16;
    p.half_split = half_split;
    return LaunchRope(p, stream);
  }
  // The orthonormal Hadamard transform (scale n^-1/2) of rows of n values, in place.
  Status Hadamard(float* x, int64_t rows, int64_t n) {
    HadamardParams p;
    p.x = x;
    p.y = x;
    p.rows = rows;
    p.n = static_cast<int>(n);
    p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
    p.round_bf16 = act_bf16;
    return LaunchHadamard(p, stream);
  }
  Status Kv(float* x, int64_t rows) {
    const NumFormat f = spec.precision.kv;
    if (f == NumFormat::kFp32 || rows == 0) return Status::Ok();
    FakeQuantParams q;
    q.x = x;
    q.y = x;
    q.rows = rows;
    q.cols = static_cast<int>(cfg.head_dim);
    if (f == NumFormat::kBf16) {
      q.format = QuantFormat::kBf16;
    } else {
      q.format = QuantFormat::kV4Kv;
      q.rope_dim = cfg.rope_head_dim;
    }
    return LaunchFakeQuant(q, stream);
  }
  int64_t StateBytes() const;
};

Status CudaSequence::Impl::Init() {
  topk = spec.index_topk > 0 ? spec.index_topk : cfg.index_topk;
  act_bf16 = spec.precision.activations == NumFormat::kBf16;
  kv_bf16_copy = KvBf16Copy(spec.precision);
  if (cfg.num_indexer_layers() > 0 && (topk < 1 || topk > kMaxTopK)) {
    return Status::InvalidArgument("index_topk " + std::to_string(topk) + " is outside [1, " +
                                   std::to_string(kMaxTopK) + "] on the CUDA backends");
  }
  if (cfg.hc_mult > kMaxHcMult) return Status::InvalidArgument("hc_mult above 8");
  if (rope.rows < spec.max_tokens) {
    return Status::Internal("the engine's RoPE tables hold " + std::to_string(rope.rows) +
                            " positions, the sequence needs " + std::to_string(spec.max_tokens));
  }

  const bool paged = layout == KvLayout::kPaged;
  const int64_t d = cfg.head_dim, cI = cfg.index_head_dim;
  int64_t kv_pages = 0, idx_pages = 0;
  for (int l = 0; l < cfg.n_layers; ++l) {
    const int r = cfg.ratio(l);
    if (r > 0) kv_pages += (spec.max_tokens / r + kPageSize - 1) / kPageSize;
    if (r == 4) idx_pages += (spec.max_tokens / 4 + kPageSize - 1) / kPageSize;
  }
  if (paged) {
    NW_ASSIGN_OR_RETURN(
        kv_pool, DevTensor::AllocateOn(
                     static_cast<size_t>(std::max<int64_t>(kv_pages, 1) * kPageSize * d), stream));
    NW_ASSIGN_OR_RETURN(
        idx_pool,
        DevTensor::AllocateOn(static_cast<size_t>(std::max<int64_t>(idx_pages, 1) * kPageSize * cI),
                              stream));
    if (kv_bf16_copy) {
      NW_ASSIGN_OR_RETURN(kv_pool16, DeviceBuffer<uint16_t>::AllocateOn(kv_pool.size(), stream));
    }
  }
  layers.resize(static_cast<size_t>(cfg.n_layers));
  for (int l = 0; l < cfg.n_layers; ++l) {
    LayerState& L = layers[static_cast<size_t>(l)];
    L.ratio = cfg.ratio(l);
    NW_ASSIGN_OR_RETURN(L.ring,
                        DevTensor::AllocateOn(static_cast<size_t>(cfg.window_size * d), stream));
    auto make_store = [&](RowStore& st, int64_t width, int64_t entries, DevTensor* pool, int* next,
                          int64_t pool_pages, DeviceBuffer<uint16_t>* pool16) -> Status {
      st.width = width;
      if (paged) {
        st.pool = pool;
        st.pool16 = pool16;
        st.next_page = next;
        st.pool_pages = pool_pages;
        NW_ASSIGN_OR_RETURN(
            st.pages_dev,
            DeviceBuffer<int32_t>::AllocateOn(
                static_cast<size_t>((entries + kPageSize - 1) / kPageSize + 1), stream));
        return Status::Ok();
      }
      NW_ASSIGN_OR_RETURN(st.contiguous,
                          DevTensor::AllocateOn(
                              static_cast<size_t>(std::max<int64_t>(entries, 1) * width), stream));
      if (pool16 != nullptr) {
        NW_ASSIGN_OR_RETURN(st.contiguous16,
                            DeviceBuffer<uint16_t>::AllocateOn(st.contiguous.size(), stream));
      }
      return Status::Ok();
    };
    if (L.ratio > 0) {
      NW_RETURN_IF_ERROR(make_store(L.comp, d, spec.max_tokens / L.ratio, &kv_pool, &kv_next_page,
                                    kv_pages, kv_bf16_copy ? &kv_pool16 : nullptr));
      const int64_t coff = L.ratio == 4 ? 2 : 1;
      L.kv_state.span = coff * L.ratio;
      L.kv_state.width = coff * d;
      NW_ASSIGN_OR_RETURN(
          L.kv_state.kv,
          DevTensor::AllocateOn(static_cast<size_t>(L.kv_state.span * L.kv_state.width), stream));
      NW_ASSIGN_OR_RETURN(
          L.kv_state.score,
          DevTensor::AllocateOn(static_cast<size_t>(L.kv_state.span * L.kv_state.width), stream));
    }
    if (L.ratio == 4) {
      NW_RETURN_IF_ERROR(make_store(L.ikeys, cI, spec.max_tokens / 4, &idx_pool, &idx_next_page,
                                    idx_pages, nullptr));
      L.ix_state.span = 8;
      L.ix_state.width = 2 * cI;
      NW_ASSIGN_OR_RETURN(L.ix_state.kv,
                          DevTensor::AllocateOn(static_cast<size_t>(8 * 2 * cI), stream));
      NW_ASSIGN_OR_RETURN(L.ix_state.score,
                          DevTensor::AllocateOn(static_cast<size_t>(8 * 2 * cI), stream));
    }
    if (L.ratio > 0 && entry_positions.count(L.ratio) == 0) {
      std::vector<int32_t> at(static_cast<size_t>(spec.max_tokens / L.ratio + 1));
      for (size_t e = 0; e < at.size(); ++e) at[e] = static_cast<int32_t>(e) * L.ratio;
      NW_RETURN_IF_ERROR(Upload(entry_positions[L.ratio], at, stream));
    }
  }
  NW_RETURN_IF_ERROR(Grow(split_ws, LinearSplitWorkspaceFloats(), stream));
  InitProbes();
  // Largest compressed count a query can see in a ratio-128 layer, and the top-k width.
  comp_stride = std::max<int64_t>({int64_t{topk}, spec.max_tokens / 128, 1});
  return Status::Ok();
}

void CudaSequence::Impl::InitProbes() {
  probes.clear();
  for (int l = 0; l < cfg.n_layers; ++l) {
    LayerState& L = layers[static_cast<size_t>(l)];
    L.probe_slot = -1;
    if (L.ratio == 4 && spec.probe) {
      L.probe_slot = static_cast<int>(probes.size());
      IndexerProbe p;
      p.layer = l;
      p.topk = topk;
      probes.push_back(std::move(p));
    }
  }
}

bool CudaSequence::Impl::Compatible(KvLayout l, int64_t chunk, const SequenceSpec& s) const {
  const int want_topk = s.index_topk > 0 ? s.index_topk : cfg.index_topk;
  return !failed && l == KvLayout::kContiguous && l == layout && chunk == prefill_chunk &&
         s.max_tokens == spec.max_tokens && s.precision == spec.precision && want_topk == topk &&
         s.fault == spec.fault && s.trace == nullptr && spec.trace == nullptr;
}

void CudaSequence::Impl::Reset(const SequenceSpec& s) {
  spec = s;
  pos = 0;
  key_end.clear();
  key_begin = 0;
  mark_pos = -1;
  mark_probe_rows.clear();
  InitProbes();
}

Status CudaSequence::Impl::EnsureScratch(int64_t n) {
  if (n <= cap) return Status::Ok();
  const int64_t D = cfg.dim, hc = cfg.hc_mult, H = cfg.n_heads, d = cfg.head_dim;
  const int64_t q = cfg.q_lora_rank, g = cfg.o_groups, R = cfg.o_lora_rank, W = cfg.window_size;
  const int64_t hI = std::max(cfg.index_n_heads, 1), cI = std::max(cfg.index_head_dim, 1);
  const int64_t E = cfg.n_routed_experts, k = cfg.n_activated_experts, I = cfg.moe_inter_dim;
  const int64_t mixw = (2 + hc) * hc;
  const int64_t slots = n * k;
  const int64_t max_tiles = slots / kLinearTileRows + E + 1;
  NW_RETURN_IF_ERROR(Grow(tokens, n, stream));
  NW_RETURN_IF_ERROR(Grow(positions, n, stream));
  NW_RETURN_IF_ERROR(Grow(visible, n, stream));
  NW_RETURN_IF_ERROR(Grow(zeros, n, stream));
  NW_RETURN_IF_ERROR(Grow(win_idx, n * W, stream));
  NW_RETURN_IF_ERROR(Grow(win_len, n, stream));
  NW_RETURN_IF_ERROR(Grow(comp_idx, n * comp_stride, stream));
  NW_RETURN_IF_ERROR(Grow(comp_len, n, stream));
  NW_RETURN_IF_ERROR(Grow(sel, n * std::max(topk, 1), stream));
  NW_RETURN_IF_ERROR(Grow(experts, slots, stream));
  NW_RETURN_IF_ERROR(Grow(offsets, E + 1, stream));
  NW_RETURN_IF_ERROR(Grow(list_token, slots, stream));
  NW_RETURN_IF_ERROR(Grow(slot_pos, slots, stream));
  NW_RETURN_IF_ERROR(Grow(tile_expert, max_tiles, stream));
  NW_RETURN_IF_ERROR(Grow(tile_row0, max_tiles, stream));
  NW_RETURN_IF_ERROR(Grow(tile_rows, max_tiles, stream));
  NW_RETURN_IF_ERROR(Grow(iota, slots, stream));
  NW_RETURN_IF_ERROR(Grow(dispatch_scratch, MoeDispatchScratchInts(slots, E), stream));
  NW_RETURN_IF_ERROR(Grow(X, n * hc * D, stream));
  NW_RETURN_IF_ERROR(Grow(Xn, n * hc * D, stream));
  NW_RETURN_IF_ERROR(Grow(mix, n * mixw, stream));
  NW_RETURN_IF_ERROR(Grow(coeffs, n * (2 * hc + hc * hc), stream));
  NW_RETURN_IF_ERROR(Grow(u, n * D, stream));
  NW_RETURN_IF_ERROR(Grow(xn, n * D, stream));
  NW_RETURN_IF_ERROR(Grow(y, n * D, stream));
  NW_RETURN_IF_ERROR(Grow(qr, n * q, stream));
  NW_RETURN_IF_ERROR(Grow(qh, n * H * d, stream));
  NW_RETURN_IF_ERROR(Grow(kvbuf, (W + n) * d, stream));
  if (kv_bf16_copy) NW_RETURN_IF_ERROR(Grow(kvbuf16, (W + n) * d, stream));
  NW_RETURN_IF_ERROR(Grow(o, n * H * d, stream));
  NW_RETURN_IF_ERROR(Grow(oa, n * g * R, stream));
  NW_RETURN_IF_ERROR(Grow(ckv, (128 + n) * 2 * d, stream));
  NW_RETURN_IF_ERROR(Grow(cscore, (128 + n) * 2 * d, stream));
  NW_RETURN_IF_ERROR(Grow(ikv, (8 + n) * 2 * cI, stream));
  NW_RETURN_IF_ERROR(Grow(iscore, (8 + n) * 2 * cI, stream));
  NW_RETURN_IF_ERROR(Grow(iq, n * hI * cI, stream));
  NW_RETURN_IF_ERROR(Grow(iw, n * hI, stream));
  NW_RETURN_IF_ERROR(Grow(ent, (n / 4 + 2) * std::max(d, cI), stream));
  NW_RETURN_IF_ERROR(Grow(glog, n * E, stream));
  NW_RETURN_IF_ERROR(Grow(rweights, slots, stream));
  NW_RETURN_IF_ERROR(Grow(lweights, slots, stream));
  NW_RETURN_IF_ERROR(Grow(g1, slots * I, stream));
  NW_RETURN_IF_ERROR(Grow(g3, slots * I, stream));
  NW_RETURN_IF_ERROR(Grow(Y, slots * D, stream));
  NW_RETURN_IF_ERROR(Grow(sh1, n * I, stream));
  NW_RETURN_IF_ERROR(Grow(sh3, n * I, stream));
  NW_RETURN_IF_ERROR(Grow(S, n * D, stream));
  NW_RETURN_IF_ERROR(Grow(hmix, n * hc, stream));
  NW_RETURN_IF_ERROR(Grow(hu, n * D, stream));
  NW_RETURN_IF_ERROR(Grow(hn, n * D, stream));
  NW_RETURN_IF_ERROR(Grow(pr_rank, n, stream));
  NW_RETURN_IF_ERROR(Grow(pr_hit, n, stream));
  NW_RETURN_IF_ERROR(Grow(pr_score, n, stream));
  NW_RETURN_IF_ERROR(Grow(pr_kth, n, stream));
  NW_RETURN_IF_ERROR(Grow(pr_next, n, stream));
  std::vector<int32_t> host(static_cast<size_t>(slots));
  for (int64_t i = 0; i < slots; ++i) host[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  NW_RETURN_IF_ERROR(Upload(iota, host, stream));
  NW_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(zeros.data(), 0, zeros.bytes(), stream));
  NW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  cap = n;
  return Status::Ok();
}

Status CudaSequence::Impl::Compress(const DevCompressor& c, bool indexer, const DevTensor& cos,
                                    const DevTensor& sin, float* kvp, float* scorep, int64_t n,
                                    int64_t s, CompState& state, RowStore& store) {
  // kvp / scorep: the chunk's projections at row `span` of buffers with `span` rows of headroom.
  const int64_t r = c.ratio, dim = c.dim, rd = cfg.rope_head_dim;
  const bool overlap = r == 4;
  const int64_t cw = (overlap ? 2 : 1) * dim, span = state.span;
  float* kv_chunk = kvp + span * cw;
  float* score_chunk = scorep + span * cw;
  AddApeParams ap;
  ap.score = score_chunk;
  ap.ape = c.ape.data();
  ap.tokens = n;
  ap.width = cw;
  ap.first_pos = s;
  ap.ratio = static_cast<int>(r);
  NW_RETURN_IF_ERROR(LaunchAddApe(ap, stream));
  const int64_t prev = std::min(s, span);
  NW_RETURN_IF_ERROR(CopyD2D(kv_chunk - prev * cw, state.kv.data(), prev * cw, stream));
  NW_RETURN_IF_ERROR(CopyD2D(score_chunk - prev * cw, state.score.data(), prev * cw, stream));
  const float* kv_rows = kv_chunk - prev * cw;
  const float* score_rows = score_chunk - prev * cw;
  const int64_t total = prev + n;
  const int64_t first_entry = s / r, n_entries = (s + n) / r - s / r;
  if (n_entries > 0) {
    CompressPoolParams cp;
    cp.kv = kv_rows;
    cp.score = score_rows;
    cp.out = ent.data();
    cp.n_rows = total;
    cp.first_pos = s - prev;
    cp.first_entry = first_entry;
    cp.n_entries = n_entries;
    cp.ratio = static_cast<int>(r);
    cp.dim = static_cast<int>(dim);
    cp.overlap = overlap;
    NW_RETURN_IF_ERROR(LaunchCompressPool(cp, stream));
    NW_RETURN_IF_ERROR(Act(spec.precision, ent.data(), n_entries, dim, stream));
    NW_RETURN_IF_ERROR(Norm(ent.data(), c.norm.data(), n_entries, dim));
    const auto table = entry_positions.find(static_cast<int>(r));
    if (table == entry_positions.end()) return Status::Internal("no entry positions for the ratio");
    const int32_t* epos = table->second.data() + first_entry;
    // Faults indexer-rope-layout (the index keys rotated half-split) and compressed-kv-no-rope
    // (compressed KV entries stored unrotated).
    if (indexer || spec.fault != Fault::kCompressedKvNoRope) {
      NW_RETURN_IF_ERROR(Rope(ent.data(), n_entries, dim, static_cast<int>(dim - rd), 1, epos, cos,
                              sin, false, indexer && spec.fault == Fault::kIndexerRopeLayout));
    }
    if (indexer) {
      NW_RETURN_IF_ERROR(Hadamard(ent.data(), n_entries, dim));
      NW_RETURN_IF_ERROR(IndexFormat(spec.precision.index_k, ent.data(), n_entries, dim, stream));
    } else {
      NW_RETURN_IF_ERROR(Kv(ent.data(), n_entries));
    }
    if (store.width != dim) return Status::Internal("compressor width differs from its store's");
    NW_RETURN_IF_ERROR(store.Store(ent.data(), first_entry, n_entries, stream));
  }
  // Keep the projections of the last `span` tokens for the entries of later chunks.
  const int64_t keep = std::min(total, span);
  NW_RETURN_IF_ERROR(CopyD2D(state.kv.data(), kv_rows + (total - keep) * cw, keep * cw, stream));
  NW_RETURN_IF_ERROR(
      CopyD2D(state.score.data(), score_rows + (total - keep) * cw, keep * cw, stream));
  // Fault partial-block-mod4: a multi-token chunk ending 3 tokens into a ratio-4 block keeps none
  // of that partial block. The CPU keeps these rows in a ring (position p at row p mod span), so
  // the rows of the partial block's positions keep what their ring rows held before the chunk:
  // the row of the position q < s with q = p (mod span), or zeros where none was written.
  if (spec.fault == Fault::kPartialBlockMod4 && r == 4 && n > 1 && (s + n) % 4 == 3) {
    const int64_t first_kept = s + n - keep;
    for (int64_t p = std::max((s + n) / 4 * 4, first_kept); p < s + n; ++p) {
      const int64_t q = p - span * ((p - s) / span + 1);
      float* kv_dst = state.kv.data() + (p - first_kept) * cw;
      float* score_dst = state.score.data() + (p - first_kept) * cw;
      if (q >= 0) {  // q >= s - prev: the old state's rows are kv_rows[0, prev)
        NW_RETURN_IF_ERROR(CopyD2D(kv_dst, kv_rows + (q - (s - prev)) * cw, cw, stream));
        NW_RETURN_IF_ERROR(CopyD2D(score_dst, score_rows + (q - (s - prev)) * cw, cw, stream));
      } else {
        NW_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(kv_dst, 0, cw * sizeof(float), stream));
        NW_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(score_dst, 0, cw * sizeof(float), stream));
      }
    }
  }
  return Status::Ok();
}

Status CudaSequence::Impl::Select(int l, int64_t n, int64_t s) {
  LayerState& L = layers[static_cast<size_t>(l)];
  const int64_t hI = cfg.index_n_heads, cI = cfg.index_head_dim;
  const bool probing = spec.probe.has_value() && L.probe_slot >= 0;
  const int64_t probe_from = probing ? std::max<int64_t>(0, spec.probe->query_begin - s) : n;
  const int64_t max_visible = (s + n) / 4;
  const int64_t cols = std::max<int64_t>(max_visible, 1);
  const int64_t qb = std::max<int64_t>(1, std::min<int64_t>(n, kMaxScoreFloats / cols));
  NW_RETURN_IF_ERROR(Grow(scores, qb * cols, stream));
  NW_RETURN_IF_ERROR(L.ikeys.Reserve(max_visible, stream));
  const bool mma = IndexerOnTensorCores(spec.precision);
  if (mma) {
    // The chunk's queries and the keys it can reach (the mapped pages of a paged pool), as bf16:
    // exact, the values are bf16 values already.
    const int64_t key_rows =
        L.ikeys.paged() ? int64_t{*L.ikeys.next_page} * kPageSize : max_visible;
    NW_RETURN_IF_ERROR(Grow(iq16, n * hI * cI, stream));
    // Sized for every key the store can hold at once, so later chunks (larger positions) do not
    // reallocate it (and invalidate the sequence's graphs).
    NW_RETURN_IF_ERROR(
        Grow(ikeys16, std::max<int64_t>({key_rows, L.ikeys.rows(), int64_t{1}}) * cI, stream));
    PackBf16Params pq;
    pq.x = iq.data();
    pq.y = iq16.data();
    pq.rows = n * hI;
    pq.cols = static_cast<int>(cI);
    pq.x_stride = pq.y_stride = cI;
    NW_RETURN_IF_ERROR(LaunchPackBf16(pq, stream));
    if (key_rows > 0) {
      PackBf16Params pk = pq;
      pk.x = L.ikeys.base();
      pk.y = ikeys16.data();
      pk.rows = key_rows;
      NW_RETURN_IF_ERROR(LaunchPackBf16(pk, stream));
    }
  }
  for (int64_t t0 = 0; t0 < n; t0 += qb) {
    const int64_t t1 = std::min(n, t0 + qb), mq = t1 - t0;
    const int64_t block_vis = key_end[static_cast<size_t>(t1 - 1)];  // the block's largest
    if (block_vis == 0) {
      NW_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
          sel.data() + t0 * topk, 0xFF, static_cast<size_t>(mq * topk) * sizeof(int32_t), stream));
    } else {
      IndexerLogitsParams ip;
      ip.w = iw.data() + t0 * hI;
      if (mma) {
        ip.q = iq16.data() + t0 * hI * cI;
        ip.k = ikeys16.data();
        ip.k_format = IndexerKeyFormat::kBf16;
        ip.key_rows = static_cast<int64_t>(ikeys16.size()) / cI;
      } else {
        ip.q = iq.data() + t0 * hI * cI;
        ip.k = L.ikeys.base();
        ip.k_format = IndexerKeyFormat::kFp32;
        ip.key_rows = L.ikeys.rows();
      }
      ip.m = mq;
      ip.n_heads = static_cast<int>(hI);
      ip.head_dim = static_cast<int>(cI);
      if (L.ikeys.paged()) {
        ip.block_table = L.ikeys.table();
        ip.block_table_stride = static_cast<int64_t>(L.ikeys.pages_dev.size());
        ip.query_row = zeros.data();
        ip.lengths = visible.data() + t0;
        ip.page_size = kPageSize;
      } else {
        ip.ks = zeros.data();
        ip.ke = visible.data() + t0;
      }
      ip.out = scores.data();
      ip.out_stride = block_vis;
      ip.out_cols = block_vis;
      ip.max_len = block_vis;
      NW_RETURN_IF_ERROR(LaunchIndexerLogits(ip, stream));
      NW_RETURN_IF_ERROR(
          LaunchMaskKeyPrefix(scores.data(), mq, block_vis, block_vis, key_begin, stream));
      TopKParams tp;
      tp.scores = scores.data();
      tp.lengths = visible.data() + t0;
      tp.out = sel.data() + t0 * topk;
      tp.rows = mq;
      tp.n = block_vis;
      tp.stride = block_vis;
      tp.k = topk;
      NW_RETURN_IF_ERROR(LaunchTopK(tp, stream));
      NW_RETURN_IF_ERROR(
          LaunchDropSelectedBelow(sel.data() + t0 * topk, mq, topk, key_begin, stream));
    }
    const int64_t r0 = std::max(t0, probe_from);
    if (r0 < t1) {
      ProbeParams pp;
      pp.scores = scores.data() + (r0 - t0) * std::max<int64_t>(block_vis, 1);
      pp.score_stride = std::max<int64_t>(block_vis, 1);
      pp.topk = sel.data() + r0 * topk;
      pp.visible = visible.data() + r0;
      pp.rows = t1 - r0;
      pp.k = topk;
      pp.ratio = 4;
      pp.needle_begin = spec.probe->needle_begin;
      pp.needle_end = spec.probe->needle_end;
      pp.key_begin = key_begin;
      pp.needle_rank = pr_rank.data() + r0;
      pp.in_topk = pr_hit.data() + r0;
      pp.needle_score = pr_score.data() + r0;
      pp.kth_score = pr_kth.data() + r0;
      pp.next_score = pr_next.data() + r0;
      NW_RETURN_IF_ERROR(LaunchProbe(pp, stream));
    }
  }
  if (probe_from < n) {
    const size_t rows = static_cast<size_t>(n - probe_from);
    std::vector<int32_t> rank, sets;
    std::vector<uint8_t> hit;
    std::vector<float> score, kth, next;
    NW_RETURN_IF_ERROR(Download(pr_rank.data() + probe_from, rows, &rank, stream));
    NW_RETURN_IF_ERROR(Download(pr_hit.data() + probe_from, rows, &hit, stream));
    NW_RETURN_IF_ERROR(Download(pr_score.data() + probe_from, rows, &score, stream));
    NW_RETURN_IF_ERROR(Download(pr_kth.data() + probe_from, rows, &kth, stream));
    NW_RETURN_IF_ERROR(Download(pr_next.data() + probe_from, rows, &next, stream));
    IndexerProbe& pr = probes[static_cast<size_t>(L.probe_slot)];
    if (spec.probe->keep_topk_sets) {
      NW_RETURN_IF_ERROR(Download(sel.data() + probe_from * topk, rows * static_cast<size_t>(topk),
                                  &sets, stream));
      pr.topk_sets.insert(pr.topk_sets.end(), sets.begin(), sets.end());
    }
    for (size_t i = 0; i < rows; ++i) {
      const int64_t p = s + probe_from + static_cast<int64_t>(i);
      pr.positions.push_back(p);
      pr.num_visible.push_back(key_end[static_cast<size_t>(probe_from) + i]);
    }
    pr.needle_rank.insert(pr.needle_rank.end(), rank.begin(), rank.end());
    pr.in_topk.insert(pr.in_topk.end(), hit.begin(), hit.end());
    pr.needle_score.insert(pr.needle_score.end(), score.begin(), score.end());
    pr.kth_score.insert(pr.kth_score.end(), kth.begin(), kth.end());
    pr.next_score.insert(pr.next_score.end(), next.begin(), next.end());
  }
  return Status::Ok();
}

Status CudaSequence::Impl::Attention(int l, int64_t n, int64_t s) {
  const DevLayer& a = m.layers[static_cast<size_t>(l)];
  LayerState& L = layers[static_cast<size_t>(l)];
  const int64_t D = cfg.dim, H = cfg.n_heads, d = cfg.head_dim, q = cfg.q_lora_rank;
  const int64_t W = cfg.window_size, rd = cfg.rope_head_dim, nope = d - rd;
  const int64_t g = cfg.o_groups, R = cfg.o_lora_rank;
  const int64_t hI = cfg.index_n_heads, cI = cfg.index_head_dim;
  const int ratio = L.ratio;
  // Fault compress-rope-base: the compressed layers get the plain layers' tables.
  const bool yarn = ratio > 0 && spec.fault != Fault::kCompressRopeBase;
  const DevTensor& cos = yarn ? rope.comp_cos : rope.plain_cos;
  const DevTensor& sin = yarn ? rope.comp_sin : rope.plain_sin;
  const PrecisionProfile& prof = spec.precision;
  float* kvc = kvbuf.data() + W * d;  // the chunk's raw KV, after the ring's copy

  // Projections from x.
  NW_RETURN_IF_ERROR(Lin(xn.data(), n, D, a.wq_a, q, qr.data(), true, true));
  NW_RETURN_IF_ERROR(Lin(xn.data(), n, D, a.wkv, d, kvc, true, true));
  const int64_t kv_span = ratio == 4 ? 8 : ratio;
  const int64_t cw = (ratio == 4 ? 2 : 1) * d;
  if (ratio > 0) {
    NW_RETURN_IF_ERROR(
        Lin(xn.data(), n, D, a.compressor->wkv, cw, ckv.data() + kv_span * cw, true));
    NW_RETURN_IF_ERROR(
        Lin(xn.data(), n, D, a.compressor->wgate, cw, cscore.data() + kv_span * cw, true));
  }
  if (ratio == 4) {
    const DevCompressor& ic = *a.ix_compressor;
    NW_RETURN_IF_ERROR(Lin(xn.data(), n, D, ic.wkv, 2 * cI, ikv.data() + 8 * 2 * cI, true));
    NW_RETURN_IF_ERROR(Lin(xn.data(), n, D, ic.wgate, 2 * cI, iscore.data() + 8 * 2 * cI, true));
    NW_RETURN_IF_ERROR(Lin(xn.data(), n, D, a.ix_weights_proj, hI, iw.data(), true, true));
  }
  // 1. Query latent and raw KV.
  NW_RETURN_IF_ERROR(Norm(qr.data(), a.q_norm.data(), n, q));
  NW_RETURN_IF_ERROR(Norm(kvc, a.kv_norm.data(), n, d));
  NW_RETURN_IF_ERROR(Rope(kvc, n, d, static_cast<int>(nope), 1, positions.data(), cos, sin, false));
  NW_RETURN_IF_ERROR(Kv(kvc, n));
  // 2. Compressed entries completed by this chunk; the indexer's weights.
  if (ratio > 0) {
    NW_RETURN_IF_ERROR(Compress(*a.compressor, false, cos, sin, ckv.data(), cscore.data(), n, s,
                                L.kv_state, L.comp));
  }
  if (ratio == 4) {
    NW_RETURN_IF_ERROR(Compress(*a.ix_compressor, true, cos, sin, ikv.data(), iscore.data(), n, s,
                                L.ix_state, L.ikeys));
    const float wscale = static_cast<float>(std::pow(static_cast<double>(cI), -0.5) *
                                            std::pow(static_cast<double>(hI), -0.5));
    NW_RETURN_IF_ERROR(LaunchScale(iw.data(), n * hI, wscale, stream));
  }
  // Query heads and indexer queries from qr.
  NW_RETURN_IF_ERROR(Lin(qr.data(), n, q, a.wq_b, H * d, qh.data(), true, true));
  if (ratio == 4)
    NW_RETURN_IF_ERROR(Lin(qr.data(), n, q, a.ix_wq_b, hI * cI, iq.data(), true, true));
  NW_RETURN_IF_ERROR(Norm(qh.data(), nullptr, n * H, d));
  NW_RETURN_IF_ERROR(Rope(qh.data(), n * H, d, static_cast<int>(nope), static_cast<int>(H),
                          positions.data(), cos, sin, false));
  if (ratio == 4) {
    NW_RETURN_IF_ERROR(Rope(iq.data(), n * hI, cI, static_cast<int>(cI - rd), static_cast<int>(hI),
                            positions.data(), cos, sin, false,
                            spec.fault == Fault::kIndexerRopeLayout));
    NW_RETURN_IF_ERROR(Hadamard(iq.data(), n * hI, cI));
    NW_RETURN_IF_ERROR(IndexFormat(prof.index_q, iq.data(), n * hI, cI, stream));
  }
  // 3. Entry lists and the sparse attention.
  NW_RETURN_IF_ERROR(CopyD2D(kvbuf.data(), L.ring.data(), W * d, stream));
  if (ratio == 4) NW_RETURN_IF_ERROR(Select(l, n, s));
  AttnIndicesParams ai;
  ai.tokens = n;
  ai.first_pos = s;
  ai.window = static_cast<int>(W);
  ai.win_idx = win_idx.data();
  ai.win_len = win_len.data();
  ai.comp_idx = comp_idx.data();
  ai.comp_len = comp_len.data();
  ai.comp_stride = comp_stride;
  ai.ratio = ratio;
  ai.page_size = kPageSize;
  ai.pages = ratio > 0 ? L.comp.table() : nullptr;
  if (ratio == 128) {
    ai.mode = CompressedMode::kAll;
  } else if (ratio == 4) {
    ai.mode = CompressedMode::kSelected;
    ai.sel = sel.data();
    ai.sel_width = topk;
  }
  NW_RETURN_IF_ERROR(LaunchAttnIndices(ai, stream));
  SparseAttentionParams sp;
  sp.q = qh.data();
  sp.q_bf16 = false;
  sp.sink = a.attn_sink.data();
  sp.out = o.data();
  sp.m = n;
  sp.n_heads = static_cast<int>(H);
  sp.head_dim = static_cast<int>(d);
  sp.scale = static_cast<float>(std::pow(static_cast<double>(d), -0.5));
  sp.kv_format = KvFormat::kFp32;
  sp.sets[0].kv = kvbuf.data();
  if (kv_bf16_copy) {  // the window's rows and the chunk's as bf16 (exact: bf16 values)
    PackBf16Params pk;
    pk.x = kvbuf.data();
    pk.y = kvbuf16.data();
    pk.rows = W + n;
    pk.cols = static_cast<int>(d);
    pk.x_stride = pk.y_stride = d;
    NW_RETURN_IF_ERROR(LaunchPackBf16(pk, stream));
    sp.kv_format = KvFormat::kBf16;
    sp.sets[0].kv = kvbuf16.data();
  }
  sp.sets[0].rows = W + n;
  sp.sets[0].indices = win_idx.data();
  sp.sets[0].lengths = win_len.data();
  sp.sets[0].index_stride = W;
  if (ratio > 0) {
    sp.sets[1].kv = kv_bf16_copy ? static_cast<const void*>(L.comp.base16())
                                 : static_cast<const void*>(L.comp.base());
    sp.sets[1].rows = L.comp.rows();
    sp.sets[1].indices = comp_idx.data();
    sp.sets[1].lengths = comp_len.data();
    sp.sets[1].index_stride = comp_stride;
  }
  sp.round_bf16 = act_bf16;  // o is an activation rounding point
  // q and every KV row are bf16 values under bf16 activations with rounded KV (Norm, Rope and Kv
  // round them): the few-heads tensor-core kernel then applies (kernels/cuda/attention.h).
  sp.bf16_values = kv_bf16_copy;
  NW_RETURN_IF_ERROR(LaunchSparseAttention(sp, stream));
  NW_RETURN_IF_ERROR(Rope(o.data(), n * H, d, static_cast<int>(nope), static_cast<int>(H),
                          positions.data(), cos, sin, true));
  // Grouped wo_a (Dot order, 8 lanes), then wo_b.
  LinearParams lp;
  lp.x = o.data();
  lp.w = a.wo_a.data();
  TensorCores(lp, a.wo_a, true);         // o: rounded by Act and Rope
  lp.round_bf16 = lp.w_bf16 != nullptr;  // oa is an activation rounding point
  lp.y = oa.data();
  lp.rows = n;
  lp.in = H * d / g;
  lp.out = R;
  lp.x_stride = H * d;
  lp.y_stride = g * R;
  lp.lanes = 8;
  lp.batches = static_cast<int>(g);
  lp.x_batch_stride = H * d / g;
  lp.w_batch_stride = R * (H * d / g);
  lp.y_batch_stride = R;
  NW_RETURN_IF_ERROR(LaunchLinear(lp, stream));
  if (!lp.round_bf16) NW_RETURN_IF_ERROR(Act(prof, oa.data(), n, g * R, stream));
  NW_RETURN_IF_ERROR(Lin(oa.data(), n, g * R, a.wo_b, D, y.data(), true, true));
  // 4. The chunk's raw KV joins the window ring.
  RingUpdateParams ru;
  ru.ring = L.ring.data();
  ru.chunk = kvc;
  ru.tokens = n;
  ru.first_pos = s;
  ru.window = static_cast<int>(W);
  ru.dim = d;
  return LaunchRingUpdate(ru, stream);
}

Status CudaSequence::Impl::Moe(int l, int64_t n) {
  const DevLayer& f = m.layers[static_cast<size_t>(l)];
  const int64_t D = cfg.dim, E = cfg.n_routed_experts, k = cfg.n_activated_experts;
  const int64_t I = cfg.moe_inter_dim, slots = n * k;
  NW_RETURN_IF_ERROR(Lin(xn.data(), n, D, f.gate, E, glog.data(), true));
  MoeRouteParams rp;
  rp.logits = glog.data();
  const bool hash = cfg.is_hash_layer(l);
  rp.bias = (!hash && f.gate_bias.size() > 0) ? f.gate_bias.data() : nullptr;
  rp.tid2eid = hash ? f.tid2eid.data() : nullptr;
  rp.token_ids = tokens.data();
  rp.experts = experts.data();
  rp.weights = rweights.data();
  rp.tokens = n;
  rp.n_experts = static_cast<int>(E);
  rp.k = static_cast<int>(k);
  rp.score_func = cfg.score_func == ScoreFunc::kSoftmax   ? MoeScoreFunc::kSoftmax
                  : cfg.score_func == ScoreFunc::kSigmoid ? MoeScoreFunc::kSigmoid
                                                          : MoeScoreFunc::kSqrtSoftplus;
  rp.route_scale = static_cast<float>(cfg.route_scale);
  NW_RETURN_IF_ERROR(LaunchMoeRoute(rp, stream));
  const int64_t max_tiles = slots / kLinearTileRows + E + 1;
  MoeDispatchParams dp;
  dp.experts = experts.data();
  dp.offsets = offsets.data();
  dp.list_token = list_token.data();
  dp.position = slot_pos.data();
  dp.tile_expert = tile_expert.data();
  dp.tile_row0 = tile_row0.data();
  dp.tile_rows = tile_rows.data();
  dp.chunk_counts = dispatch_scratch.data();
  dp.tokens = n;
  dp.n_experts = static_cast<int>(E);
  dp.k = static_cast<int>(k);
  dp.tile_rows_max = kLinearTileRows;
  dp.max_tiles = max_tiles;
  NW_RETURN_IF_ERROR(LaunchMoeDispatch(dp, stream));
  MoeListWeightParams wp;
  wp.weights = rweights.data();
  wp.position = slot_pos.data();
  wp.list_weight = lweights.data();
  wp.slots = slots;
  NW_RETURN_IF_ERROR(LaunchMoeListWeights(wp, stream));
  auto gathered = [&](const float* x, const int32_t* rows, const DevTensor& w, int64_t in,
                      int64_t out, float* dst, bool x_bf16) {
    LinearParams p;
    p.x = x;
    p.w = w.data();
    TensorCores(p, w, x_bf16);
    p.y = dst;
    p.rows = slots;
    p.in = in;
    p.out = out;
    p.lanes = 4;
    p.row_index = rows;
    p.tile_expert = tile_expert.data();
    p.tile_row0 = tile_row0.data();
    p.tile_rows = tile_rows.data();
    p.max_tiles = max_tiles;
    p.x_rows = n;
    return LaunchLinear(p, stream);
  };
  NW_RETURN_IF_ERROR(gathered(xn.data(), list_token.data(), f.w1_all, D, I, g1.data(), true));
  NW_RETURN_IF_ERROR(gathered(xn.data(), list_token.data(), f.w3_all, D, I, g3.data(), true));
  const float limit = static_cast<float>(cfg.swiglu_limit);
  SwiGluParams sg;
  sg.gate = g1.data();
  sg.up = g3.data();
  sg.weight = lweights.data();
  sg.out = g1.data();
  sg.rows = slots;
  sg.inter = I;
  sg.limit = limit;
  NW_RETURN_IF_ERROR(LaunchSwiGlu(sg, stream));
  NW_RETURN_IF_ERROR(gathered(g1.data(), iota.data(), f.w2_all, I, D, Y.data(), false));
  // The shared expert over every row (clamped like the routed ones unless the config says not).
  NW_RETURN_IF_ERROR(Lin(xn.data(), n, D, f.sh_w1, I, sh1.data(), true));
  NW_RETURN_IF_ERROR(Lin(xn.data(), n, D, f.sh_w3, I, sh3.data(), true));
  SwiGluParams ss;
  ss.gate = sh1.data();
  ss.up = sh3.data();
  ss.out = sh1.data();
  ss.rows = n;
  ss.inter = I;
  // Fault shared-expert-no-clamp: the shared expert's SwiGLU unclamped.
  ss.limit =
      cfg.swiglu_clamp_shared_expert && spec.fault != Fault::kSharedExpertNoClamp ? limit : 0.0f;
  NW_RETURN_IF_ERROR(LaunchSwiGlu(ss, stream));
  NW_RETURN_IF_ERROR(Lin(sh1.data(), n, I, f.sh_w2, D, S.data()));
  MoeCombineParams cp;
  cp.expert_out = Y.data();
  cp.position = slot_pos.data();
  cp.shared = S.data();
  cp.out = y.data();
  cp.tokens = n;
  cp.k = static_cast<int>(k);
  cp.dim = D;
  cp.round_bf16 = act_bf16;  // y is an activation rounding point
  return LaunchMoeCombine(cp, stream);
}

Status CudaSequence::Impl::Forward(std::span<const int32_t> toks, std::vector<float>* last,
                                   std::vector<float>* all) {
  const int64_t n = static_cast<int64_t>(toks.size());
  if (n == 0) return Status::InvalidArgument("forward needs at least one token");
  if (pos + n > spec.max_tokens) {
    return Status::OutOfRange("sequence would reach " + std::to_string(pos + n) +
                              " tokens, above its capacity of " + std::to_string(spec.max_tokens));
  }
  for (int32_t t : toks) {
    if (t < 0 || t >= cfg.vocab_size) {
      return Status::InvalidArgument("token id " + std::to_string(t) + " outside [0, " +
                                     std::to_string(cfg.vocab_size) + ")");
    }
  }
  if (const Status st = EnsureScratch(n); !st.ok()) {
    return Status::ResourceExhausted("the GPU could not hold the activations of a " +
                                     std::to_string(n) + "-token chunk: " + st.message());
  }
  const int64_t s = pos, V = cfg.vocab_size;
  const int64_t rows = all != nullptr ? n : last != nullptr ? 1 : 0;
  // At least 64 rows: a longer draft later does not reallocate it (and invalidate the graphs).
  NW_RETURN_IF_ERROR(Grow(logits, std::max<int64_t>(rows, 64) * V, stream));
  std::vector<int32_t> host(toks.begin(), toks.end());
  NW_RETURN_IF_ERROR(Upload(tokens, host, stream));
  for (int64_t t = 0; t < n; ++t) host[static_cast<size_t>(t)] = static_cast<int32_t>(s + t);
  NW_RETURN_IF_ERROR(Upload(positions, host, stream));
  // The indexer's key range of each query (faults ragged-key-range and ragged-key-offset act on
  // multi-token chunks, as engine/cpu/sequence.cc's do).
  const bool range_fault = spec.fault == Fault::kRaggedKeyRange && n > 1;
  key_end.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    key_end[static_cast<size_t>(t)] =
        static_cast<int32_t>(range_fault ? (s + n) / 4 : (s + t + 1) / 4);
  }
  key_begin = spec.fault == Fault::kRaggedKeyOffset && n > 1 ? s / 4 : 0;
  NW_RETURN_IF_ERROR(Upload(visible, key_end, stream));

  // Graphs replay launches only: a probing forward downloads its rows mid-way, and a paged one
  // maps pages (host tables) as it goes, so those launch directly.
  const auto enqueue = [&] { return Enqueue(n, s, rows); };
  Status st = spec.probe.has_value()
                  ? enqueue()
                  : graphs.Run(ForwardGraphs::Key{n, s, rows}, epoch, stream, enqueue, &capturing);
  if (!st.ok()) {
    failed = true;
    return st;
  }
  pos += n;
  if (rows == 0) return Status::Ok();
  std::vector<float> out;
  st = Download(logits.data(), static_cast<size_t>(rows * V), &out, stream);
  if (!st.ok()) {
    failed = true;
    return st;
  }
  if (last != nullptr) last->assign(out.end() - V, out.end());
  if (all != nullptr) *all = std::move(out);
  return Status::Ok();
}

Status CudaSequence::Impl::Enqueue(int64_t n, int64_t s, int64_t rows) {
  const int64_t D = cfg.dim, hc = cfg.hc_mult, V = cfg.vocab_size;
  const int64_t stream_w = hc * D;
  const PrecisionProfile& prof = spec.precision;
  EmbedParams ep;
  ep.table = m.embed.data();
  ep.ids = tokens.data();
  ep.x = X.data();
  ep.tokens = n;
  ep.dim = D;
  ep.copies = static_cast<int>(hc);
  NW_RETURN_IF_ERROR(LaunchEmbed(ep, stream));
  NW_RETURN_IF_ERROR(Act(prof, X.data(), n, stream_w, stream));

  auto pre = [&](const DevHc& h, const DevTensor& norm_w) -> Status {
    const int64_t mixw = (2 + hc) * hc;
    NW_RETURN_IF_ERROR(Lin(X.data(), n, stream_w, h.fn, mixw, mix.data(), true));
    MhcPreParams mp;
    mp.x = X.data();
    mp.raw_mix = mix.data();
    mp.base = h.base.data();
    mp.scale = h.scale.data();
    mp.u = u.data();
    mp.coeffs = coeffs.data();
    mp.tokens = n;
    mp.n = static_cast<int>(hc);
    mp.dim = static_cast<int>(D);
    mp.sinkhorn_iters = cfg.hc_sinkhorn_iters;
    mp.hc_eps = static_cast<float>(cfg.hc_eps);
    mp.norm_eps = static_cast<float>(cfg.norm_eps);
    mp.round_bf16 = act_bf16;  // u is an activation rounding point
    NW_RETURN_IF_ERROR(LaunchMhcPre(mp, stream));
    return NormInto(u.data(), norm_w.data(), n, D, xn.data());
  };
  auto post = [&]() -> Status {
    MhcPostParams pp;
    pp.x = X.data();
    pp.y = y.data();
    pp.coeffs = coeffs.data();
    pp.x_out = Xn.data();
    pp.tokens = n;
    pp.n = static_cast<int>(hc);
    pp.dim = static_cast<int>(D);
    pp.round_bf16 = act_bf16;  // the residual streams are an activation rounding point
    NW_RETURN_IF_ERROR(LaunchMhcPost(pp, stream));
    std::swap(X, Xn);
    return Status::Ok();
  };
  for (int l = 0; l < cfg.n_layers; ++l) {
    const DevLayer& b = m.layers[static_cast<size_t>(l)];
    NW_RETURN_IF_ERROR(pre(b.hc_attn, b.attn_norm));
    NW_RETURN_IF_ERROR(Attention(l, n, s));
    NW_RETURN_IF_ERROR(post());
    NW_RETURN_IF_ERROR(pre(b.hc_ffn, b.ffn_norm));
    NW_RETURN_IF_ERROR(Moe(l, n));  // y rounded by the combine under bf16 activations
    NW_RETURN_IF_ERROR(post());
  }

  // Head over the rows whose logits are wanted.
  if (rows == 0) return Status::Ok();
  const float* xr = X.data() + (n - rows) * stream_w;
  NW_RETURN_IF_ERROR(Lin(xr, rows, stream_w, m.hc_head.fn, hc, hmix.data(), true));
  MhcPreParams hp;
  hp.x = xr;
  hp.raw_mix = hmix.data();
  hp.base = m.hc_head.base.data();
  hp.scale = m.hc_head.scale.data();
  hp.u = hu.data();
  hp.tokens = rows;
  hp.n = static_cast<int>(hc);
  hp.dim = static_cast<int>(D);
  hp.hc_eps = static_cast<float>(cfg.hc_eps);
  hp.norm_eps = static_cast<float>(cfg.norm_eps);
  hp.head = true;
  hp.round_bf16 = act_bf16;
  NW_RETURN_IF_ERROR(LaunchMhcPre(hp, stream));
  NW_RETURN_IF_ERROR(Norm(hu.data(), m.norm.data(), rows, D));
  return Lin(hu.data(), rows, D, m.head, V, logits.data(), true);
}

int64_t CudaSequence::Impl::StateBytes() const {
  int64_t b = 0;
  for (const LayerState& L : layers) {
    b += static_cast<int64_t>(L.ring.bytes() + L.comp.contiguous.bytes() +
                              L.ikeys.contiguous.bytes() + L.kv_state.kv.bytes() +
                              L.kv_state.score.bytes() + L.ix_state.kv.bytes() +
                              L.ix_state.score.bytes() + L.comp.contiguous16.bytes());
  }
  return b + static_cast<int64_t>(kv_pool.bytes() + kv_pool16.bytes() + idx_pool.bytes());
}

// ---- CudaSequence ------------------------------------------------------------------------------

CudaSequence::CudaSequence(std::unique_ptr<Impl> impl, std::weak_ptr<SequencePool> pool)
    : impl_(std::move(impl)), pool_(std::move(pool)) {}

CudaSequence::~CudaSequence() {
  const std::shared_ptr<SequencePool> pool = pool_.lock();
  if (pool == nullptr || impl_ == nullptr || impl_->failed ||
      impl_->layout != KvLayout::kContiguous || pool->max_idle_ == 0) {
    return;
  }
  if (pool->idle_.size() >= pool->max_idle_) pool->idle_.erase(pool->idle_.begin());
  pool->idle_.push_back(std::move(impl_));
}

ForwardGraphs::Stats CudaSequence::graph_stats() const { return impl_->graphs.stats(); }

SequencePool::SequencePool(size_t max_idle, size_t graphs_per_sequence)
    : max_idle_(max_idle), graphs_per_sequence_(graphs_per_sequence) {}
SequencePool::~SequencePool() = default;
void SequencePool::Clear() { idle_.clear(); }

std::unique_ptr<CudaSequence> CudaSequence::Reuse(const std::shared_ptr<SequencePool>& pool,
                                                  KvLayout layout, int64_t prefill_chunk,
                                                  const SequenceSpec& spec) {
  if (pool == nullptr) return nullptr;
  auto& idle = pool->idle_;
  for (auto it = idle.rbegin(); it != idle.rend(); ++it) {
    if (!(*it)->Compatible(layout, prefill_chunk, spec)) continue;
    std::unique_ptr<Impl> impl = std::move(*it);
    idle.erase(std::next(it).base());
    impl->Reset(spec);
    return std::unique_ptr<CudaSequence>(new CudaSequence(std::move(impl), pool));
  }
  idle.clear();
  return nullptr;
}

Status CudaSequence::CheckFits(const ModelConfig& cfg, int64_t prefill_chunk,
                               const SequenceSpec& spec) {
  if (spec.max_tokens <= 0) {
    return Status::InvalidArgument("sequence capacity (max_tokens) must be positive");
  }
  if (spec.probe) {
    const ProbeRequest& p = *spec.probe;
    if (p.needle_begin < 0 || p.needle_end < p.needle_begin || p.query_begin < 0) {
      return Status::InvalidArgument(
          "probe ranges must satisfy 0 <= needle_begin <= needle_end and query_begin >= 0");
    }
  }
  // What the sequence will hold on the device, checked before anything is allocated (a request
  // that cannot fit fails here with resource_exhausted, never with a crash or a truncation).
  const double f = 4.0;  // bytes per stored value
  const double T = static_cast<double>(spec.max_tokens);
  double need = 4.0 * T * (cfg.rope_head_dim / 2) * f;  // four RoPE tables
  const bool kv_copy = KvBf16Copy(spec.precision);      // + 2 bytes a compressed KV value
  for (int l = 0; l < cfg.n_layers; ++l) {
    const int r = cfg.ratio(l);
    need += static_cast<double>(cfg.window_size) * cfg.head_dim * f;
    if (r > 0) need += (T / r + kPageSize) * cfg.head_dim * (kv_copy ? f + 2.0 : f);
    if (r == 4) need += (T / 4 + kPageSize) * cfg.index_head_dim * f;
  }
  const double chunk = prefill_chunk > 0 ? std::min<double>(T, prefill_chunk) : T;
  const double per_row =
      2.0 * cfg.hc_mult * cfg.dim + 8.0 * cfg.dim + cfg.q_lora_rank +
      3.0 * cfg.n_heads * cfg.head_dim + cfg.o_groups * cfg.o_lora_rank +
      (kv_copy ? 8.5 : 8.0) * cfg.head_dim + (4.0 + cfg.index_n_heads) * cfg.index_head_dim +
      cfg.n_activated_experts * (2.0 * cfg.moe_inter_dim + cfg.dim) + 2.0 * cfg.moe_inter_dim +
      cfg.vocab_size + cfg.window_size + std::max(cfg.index_topk, 1) + T / 128;
  need += chunk * per_row * f;
  size_t free_bytes = 0, total_bytes = 0;
  NW_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (need > 0.9 * static_cast<double>(free_bytes)) {
    // Memory earlier sequences returned to the pool counts as taken until it is trimmed.
    NW_RETURN_IF_ERROR(TrimPoolMemory());
    NW_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  }
  if (need > 0.9 * static_cast<double>(free_bytes)) {
    return Status::ResourceExhausted(
        "a sequence of " + std::to_string(spec.max_tokens) + " tokens needs about " +
        std::to_string(static_cast<int64_t>(need / (1 << 20))) + " MiB on the GPU, which has " +
        std::to_string(free_bytes >> 20) + " MiB free");
  }
  return Status::Ok();
}

Result<std::unique_ptr<CudaSequence>> CudaSequence::Create(
    const ModelConfig& cfg, const DeviceModel& model, const DeviceRope& rope, KvLayout layout,
    int64_t prefill_chunk, const SequenceSpec& spec, cudaStream_t stream,
    const std::shared_ptr<SequencePool>& pool) {
  NW_RETURN_IF_ERROR(CheckFits(cfg, prefill_chunk, spec));
  auto impl = std::make_unique<Impl>(cfg, model, rope, layout, prefill_chunk, spec, stream,
                                     pool != nullptr ? pool->graphs_per_sequence() : 0);
  const Status st = impl->Init();
  if (!st.ok()) {
    if (st.code() == StatusCode::kInternal) {
      return Status::ResourceExhausted("the GPU could not hold a sequence of " +
                                       std::to_string(spec.max_tokens) +
                                       " tokens: " + st.message());
    }
    return st;
  }
  return std::unique_ptr<CudaSequence>(new CudaSequence(std::move(impl), pool));
}

int64_t CudaSequence::position() const { return impl_->pos; }
int CudaSequence::index_topk() const { return impl_->topk; }
const std::vector<IndexerProbe>& CudaSequence::probes() const { return impl_->probes; }
int64_t CudaSequence::state_bytes() const { return impl_->StateBytes(); }

Status CudaSequence::Forward(std::span<const int32_t> tokens, std::vector<float>* last_logits,
                             std::vector<float>* all_logits) {
  return impl_->Forward(tokens, last_logits, all_logits);
}

Status CudaSequence::Prefill(std::span<const int32_t> tokens, std::vector<float>* logits) {
  if (tokens.empty()) return Status::InvalidArgument("prefill needs at least one token");
  // ragged-key-offset acts between chunks: one-pass prefill gets 1,024-token chunks under it, as
  // on the CPU (engine/fault.h).
  const size_t fault_chunk = impl_->spec.fault == Fault::kRaggedKeyOffset ? 1024 : 0;
  const size_t chunk = impl_->prefill_chunk > 0 ? static_cast<size_t>(impl_->prefill_chunk)
                       : fault_chunk > 0        ? fault_chunk
                                                : tokens.size();
  for (size_t b = 0; b < tokens.size(); b += chunk) {
    const size_t e = std::min(tokens.size(), b + chunk);
    NW_RETURN_IF_ERROR(
        impl_->Forward(tokens.subspan(b, e - b), e == tokens.size() ? logits : nullptr, nullptr));
  }
  return Status::Ok();
}

Status CudaSequence::Decode(int32_t token, std::vector<float>* logits) {
  return impl_->Forward(std::span<const int32_t>(&token, 1), logits, nullptr);
}

Status CudaSequence::Extend(std::span<const int32_t> tokens, std::vector<float>* all_logits) {
  if (tokens.empty()) return Status::InvalidArgument("extend needs at least one token");
  return impl_->Forward(tokens, nullptr, all_logits);
}

namespace {

// The device tensors a forward overwrites in place, in a fixed order.
std::vector<DevTensor*> MutableState(std::vector<LayerState>& layers) {
  std::vector<DevTensor*> t;
  for (LayerState& L : layers) {
    t.push_back(&L.ring);
    for (CompState* c : {&L.kv_state, &L.ix_state}) {
      if (c->kv.size() > 0) {
        t.push_back(&c->kv);
        t.push_back(&c->score);
      }
    }
  }
  return t;
}

}  // namespace

Status CudaSequence::Checkpoint() {
  Impl& im = *impl_;
  const std::vector<DevTensor*> state = MutableState(im.layers);
  im.mark_buffers.resize(state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    NW_RETURN_IF_ERROR(Grow(im.mark_buffers[i], static_cast<int64_t>(state[i]->size()), im.stream));
    NW_RETURN_IF_ERROR(CopyD2D(im.mark_buffers[i].data(), state[i]->data(),
                               static_cast<int64_t>(state[i]->size()), im.stream));
  }
  im.mark_probe_rows.clear();
  for (const IndexerProbe& p : im.probes) im.mark_probe_rows.push_back(p.positions.size());
  im.mark_pos = im.pos;
  return Status::Ok();
}

Status CudaSequence::Rewind() {
  Impl& im = *impl_;
  if (im.mark_pos < 0) return Status::FailedPrecondition("rewind without a checkpoint");
  const std::vector<DevTensor*> state = MutableState(im.layers);
  for (size_t i = 0; i < state.size(); ++i) {
    NW_RETURN_IF_ERROR(CopyD2D(state[i]->data(), im.mark_buffers[i].data(),
                               static_cast<int64_t>(state[i]->size()), im.stream));
  }
  for (size_t i = 0; i < im.probes.size(); ++i) {
    IndexerProbe& p = im.probes[i];
    const size_t rows = im.mark_probe_rows[i];
    p.positions.resize(rows);
    p.needle_rank.resize(rows);
    p.in_topk.resize(rows);
    p.num_visible.resize(rows);
    p.needle_score.resize(rows);
    p.kth_score.resize(rows);
    p.next_score.resize(rows);
    if (!p.topk_sets.empty()) p.topk_sets.resize(rows * static_cast<size_t>(p.topk));
  }
  im.pos = im.mark_pos;
  return Status::Ok();
}

void CudaSequence::PrependProbes(const std::vector<IndexerProbe>& earlier) {
  for (size_t i = 0; i < impl_->probes.size() && i < earlier.size(); ++i) {
    IndexerProbe& p = impl_->probes[i];
    const IndexerProbe& e = earlier[i];
    auto pre = [](auto& dst, const auto& src) { dst.insert(dst.begin(), src.begin(), src.end()); };
    pre(p.positions, e.positions);
    pre(p.needle_rank, e.needle_rank);
    pre(p.in_topk, e.in_topk);
    pre(p.num_visible, e.num_visible);
    pre(p.needle_score, e.needle_score);
    pre(p.kth_score, e.kth_score);
    pre(p.next_score, e.next_score);
    pre(p.topk_sets, e.topk_sets);
  }
}

Result<cpu::SequenceState> CudaSequence::ExportState() const {
  const Impl& im = *impl_;
  const ModelConfig& cfg = im.cfg;
  const int64_t pos = im.pos, d = cfg.head_dim, cI = cfg.index_head_dim, W = cfg.window_size;
  cpu::SequenceState st;
  st.position = pos;
  auto store_rows = [&](const RowStore& s, int64_t count, std::vector<float>* out) -> Status {
    out->assign(static_cast<size_t>(count * s.width), 0.0f);
    for (int64_t i = 0; i < count; ++i) {
      NW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
          out->data() + i * s.width, s.base() + s.Row(i) * s.width,
          static_cast<size_t>(s.width) * sizeof(float), cudaMemcpyDeviceToHost, im.stream));
    }
    return Status::Ok();
  };
  // A compressor state as the CPU's ring: position p at row p mod span.
  auto ring_state = [&](const CompState& c, std::vector<float>* kv,
                        std::vector<float>* score) -> Status {
    std::vector<float> k, s;
    NW_RETURN_IF_ERROR(Download(c.kv.data(), c.kv.size(), &k, im.stream));
    NW_RETURN_IF_ERROR(Download(c.score.data(), c.score.size(), &s, im.stream));
    kv->assign(k.size(), 0.0f);
    score->assign(s.size(), 0.0f);
    const int64_t kept = std::min(pos, c.span);
    for (int64_t i = 0; i < kept; ++i) {
      const int64_t p = pos - kept + i;
      std::copy_n(k.data() + i * c.width, c.width, kv->data() + (p % c.span) * c.width);
      std::copy_n(s.data() + i * c.width, c.width, score->data() + (p % c.span) * c.width);
    }
    return Status::Ok();
  };
  for (int l = 0; l < cfg.n_layers; ++l) {
    const LayerState& L = im.layers[static_cast<size_t>(l)];
    cpu::SequenceLayerState ls;
    ls.ratio = L.ratio;
    std::vector<float> ring;
    NW_RETURN_IF_ERROR(Download(L.ring.data(), L.ring.size(), &ring, im.stream));
    const int64_t wn = std::min(pos, W);
    ls.window.resize(static_cast<size_t>(wn * d));
    for (int64_t i = 0; i < wn; ++i) {
      const int64_t p = pos - wn + i;
      std::copy_n(ring.data() + (p % W) * d, d, ls.window.data() + i * d);
    }
    if (L.ratio > 0) {
      NW_RETURN_IF_ERROR(store_rows(L.comp, pos / L.ratio, &ls.compressed));
      NW_RETURN_IF_ERROR(ring_state(L.kv_state, &ls.kv_state_kv, &ls.kv_state_score));
    }
    if (L.ratio == 4) {
      NW_RETURN_IF_ERROR(store_rows(L.ikeys, pos / 4, &ls.index_keys));
      NW_RETURN_IF_ERROR(ring_state(L.ix_state, &ls.index_state_kv, &ls.index_state_score));
    }
    st.layers.push_back(std::move(ls));
  }
  NW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(im.stream));
  (void)cI;
  return st;
}

Status CudaSequence::ImportState(const cpu::SequenceState& st) {
  Impl& im = *impl_;
  const ModelConfig& cfg = im.cfg;
  if (im.pos != 0) return Status::FailedPrecondition("import needs a fresh sequence");
  NW_RETURN_IF_ERROR(CheckSequenceState(cfg, st, im.spec.max_tokens));
  const int64_t pos = st.position;
  const int64_t W = cfg.window_size, d = cfg.head_dim;
  // The rows go up in one copy and into their (page-mapped) places, and the bf16 copy where the
  // store keeps one, through the kernel the forward pass stores them with.
  auto put_rows = [&](RowStore& s, int64_t count, const std::vector<float>& in) -> Status {
    if (count == 0) return Status::Ok();
    NW_ASSIGN_OR_RETURN(DevTensor rows,
                        DevTensor::AllocateOn(static_cast<size_t>(count * s.width), im.stream));
    NW_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(rows.data(), in.data(),
                                            static_cast<size_t>(count * s.width) * sizeof(float),
                                            cudaMemcpyHostToDevice, im.stream));
    NW_RETURN_IF_ERROR(s.Store(rows.data(), 0, count, im.stream));
    NW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(im.stream));  // `in` is read until here
    return Status::Ok();
  };
  auto put_state = [&](CompState& c, const std::vector<float>& kv,
                       const std::vector<float>& score) -> Status {
    std::vector<float> k(c.kv.size(), 0.0f), s(c.score.size(), 0.0f);
    const int64_t kept = std::min(pos, c.span);
    for (int64_t i = 0; i < kept; ++i) {
      const int64_t p = pos - kept + i;
      std::copy_n(kv.data() + (p % c.span) * c.width, c.width, k.data() + i * c.width);
      std::copy_n(score.data() + (p % c.span) * c.width, c.width, s.data() + i * c.width);
    }
    NW_RETURN_IF_ERROR(c.kv.CopyFromHost(k.data(), k.size()));
    return c.score.CopyFromHost(s.data(), s.size());
  };
  for (int l = 0; l < cfg.n_layers; ++l) {
    const cpu::SequenceLayerState& ls = st.layers[static_cast<size_t>(l)];
    LayerState& L = im.layers[static_cast<size_t>(l)];
    std::vector<float> ring(static_cast<size_t>(W * d), 0.0f);
    const int64_t wn = std::min(pos, W);
    for (int64_t i = 0; i < wn; ++i) {
      const int64_t p = pos - wn + i;
      std::copy_n(ls.window.data() + i * d, d, ring.data() + (p % W) * d);
    }
    NW_RETURN_IF_ERROR(L.ring.CopyFromHost(ring.data(), ring.size()));
    if (L.ratio > 0) {
      NW_RETURN_IF_ERROR(put_rows(L.comp, pos / L.ratio, ls.compressed));
      NW_RETURN_IF_ERROR(put_state(L.kv_state, ls.kv_state_kv, ls.kv_state_score));
    }
    if (L.ratio == 4) {
      NW_RETURN_IF_ERROR(put_rows(L.ikeys, pos / 4, ls.index_keys));
      NW_RETURN_IF_ERROR(put_state(L.ix_state, ls.index_state_kv, ls.index_state_score));
    }
  }
  NW_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(im.stream));
  im.pos = pos;
  return Status::Ok();
}

int64_t StateBytesPerToken(const ModelConfig& cfg) {
  double per_token = 0;
  for (int l = 0; l < cfg.n_layers; ++l) {
    const int r = cfg.ratio(l);
    if (r > 0) per_token += static_cast<double>(cfg.head_dim) * 4.0 / r;
    if (r == 4) per_token += static_cast<double>(cfg.index_head_dim) * 4.0 / 4.0;
  }
  return static_cast<int64_t>(std::ceil(per_token));
}

}  // namespace nw::cuda
