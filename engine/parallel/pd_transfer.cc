#include "engine/parallel/pd_transfer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

namespace nw::parallel {

namespace {

static_assert(sizeof(float) == 4, "f32 transfer layout");

uint64_t Fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) {}
  void U32(uint32_t v) { Int(v, 4); }
  void I32(int32_t v) { Int(static_cast<uint32_t>(v), 4); }
  void U64(uint64_t v) { Int(v, 8); }
  void I64(int64_t v) { Int(static_cast<uint64_t>(v), 8); }
  void Floats(const std::vector<float>& v) {
    U64(v.size());
    for (float f : v) {
      uint32_t bits = 0;
      std::memcpy(&bits, &f, 4);
      U32(bits);
    }
  }

 private:
  void Int(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_->push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t>* out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  size_t left() const { return b_.size() - at_; }
  Status U32(uint32_t* v) {
    uint64_t x = 0;
    NW_RETURN_IF_ERROR(Int(&x, 4));
    *v = static_cast<uint32_t>(x);
    return Status::Ok();
  }
  Status I32(int32_t* v) {
    uint32_t x = 0;
    NW_RETURN_IF_ERROR(U32(&x));
    *v = static_cast<int32_t>(x);
    return Status::Ok();
  }
  Status U64(uint64_t* v) { return Int(v, 8); }
  Status I64(int64_t* v) {
    uint64_t x = 0;
    NW_RETURN_IF_ERROR(Int(&x, 8));
    *v = static_cast<int64_t>(x);
    return Status::Ok();
  }
  Status Floats(std::vector<float>* v, const std::string& what) {
    uint64_t n = 0;
    NW_RETURN_IF_ERROR(U64(&n));
    if (n > left() / 4) {
      return Status::Corruption("transfer buffer: " + what + " claims " + std::to_string(n) +
                                " values, only " + std::to_string(left()) + " bytes left");
    }
    v->resize(static_cast<size_t>(n));
    for (float& f : *v) {
      uint32_t bits = 0;
      NW_RETURN_IF_ERROR(U32(&bits));
      std::memcpy(&f, &bits, 4);
    }
    return Status::Ok();
  }

 private:
  Status Int(uint64_t* v, int bytes) {
    if (left() < static_cast<size_t>(bytes)) {
      return Status::Corruption("transfer buffer truncated at byte " + std::to_string(at_));
    }
    uint64_t x = 0;
    for (int i = 0; i < bytes; ++i) x |= static_cast<uint64_t>(b_[at_ + i]) << (8 * i);
    at_ += static_cast<size_t>(bytes);
    *v = x;
    return Status::Ok();
  }
  std::span<const uint8_t> b_;
  size_t at_ = 0;
};

constexpr std::array<uint8_t, 4> kMagic = {'N', 'W', 'P', 'D'};

}  // namespace

std::vector<uint8_t> SerializeDecodeState(const ModelConfig& cfg, const cpu::SequenceState& st) {
  std::vector<uint8_t> out(kMagic.begin(), kMagic.end());
  Writer w(&out);
  w.U32(kPdTransferVersion);
  w.U32(static_cast<uint32_t>(st.layers.size()));
  w.U32(static_cast<uint32_t>(cfg.head_dim));
  w.U32(static_cast<uint32_t>(cfg.index_head_dim));
  w.U32(static_cast<uint32_t>(cfg.window_size));
  w.I64(st.position);
  for (const cpu::SequenceLayerState& l : st.layers) {
    w.I32(l.ratio);
    w.Floats(l.window);
    w.Floats(l.compressed);
    w.Floats(l.index_keys);
    w.Floats(l.kv_state_kv);
    w.Floats(l.kv_state_score);
    w.Floats(l.index_state_kv);
    w.Floats(l.index_state_score);
  }
  w.U64(Fnv1a(out.data(), out.size()));
  return out;
}

Result<cpu::SequenceState> DeserializeDecodeState(const ModelConfig& cfg,
                                                  std::span<const uint8_t> bytes) {
  if (bytes.size() < kMagic.size() + 8 ||
      std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0) {
    return Status::Corruption("not a PD transfer buffer (bad magic or too short)");
  }
  const size_t body = bytes.size() - 8;
  {
    Reader tail(bytes.subspan(body));
    uint64_t sum = 0;
    NW_RETURN_IF_ERROR(tail.U64(&sum));
    if (sum != Fnv1a(bytes.data(), body)) {
      return Status::Corruption("PD transfer buffer checksum mismatch");
    }
  }
  Reader r(bytes.subspan(kMagic.size(), body - kMagic.size()));
  uint32_t version = 0, n_layers = 0, head_dim = 0, index_head_dim = 0, window = 0;
  NW_RETURN_IF_ERROR(r.U32(&version));
  if (version != kPdTransferVersion) {
    return Status::Unsupported("PD transfer version " + std::to_string(version) + ", expected " +
                               std::to_string(kPdTransferVersion));
  }
  NW_RETURN_IF_ERROR(r.U32(&n_layers));
  NW_RETURN_IF_ERROR(r.U32(&head_dim));
  NW_RETURN_IF_ERROR(r.U32(&index_head_dim));
  NW_RETURN_IF_ERROR(r.U32(&window));
  if (static_cast<int64_t>(n_layers) != cfg.n_layers ||
      static_cast<int64_t>(head_dim) != cfg.head_dim ||
      static_cast<int64_t>(index_head_dim) != cfg.index_head_dim ||
      static_cast<int64_t>(window) != cfg.window_size) {
    return Status::InvalidArgument(
        "PD transfer buffer is for another model shape (layers/head_dim/index_head_dim/window " +
        std::to_string(n_layers) + "/" + std::to_string(head_dim) + "/" +
        std::to_string(index_head_dim) + "/" + std::to_string(window) + ")");
  }
  cpu::SequenceState st;
  NW_RETURN_IF_ERROR(r.I64(&st.position));
  if (st.position < 0) return Status::Corruption("PD transfer buffer has a negative position");
  st.layers.resize(n_layers);
  for (uint32_t l = 0; l < n_layers; ++l) {
    cpu::SequenceLayerState& ls = st.layers[l];
    const std::string P = "layer " + std::to_string(l) + " ";
    NW_RETURN_IF_ERROR(r.I32(&ls.ratio));
    NW_RETURN_IF_ERROR(r.Floats(&ls.window, P + "window"));
    NW_RETURN_IF_ERROR(r.Floats(&ls.compressed, P + "compressed"));
    NW_RETURN_IF_ERROR(r.Floats(&ls.index_keys, P + "index keys"));
    NW_RETURN_IF_ERROR(r.Floats(&ls.kv_state_kv, P + "compressor kv state"));
    NW_RETURN_IF_ERROR(r.Floats(&ls.kv_state_score, P + "compressor score state"));
    NW_RETURN_IF_ERROR(r.Floats(&ls.index_state_kv, P + "indexer kv state"));
    NW_RETURN_IF_ERROR(r.Floats(&ls.index_state_score, P + "indexer score state"));
  }
  if (r.left() != 0) {
    return Status::Corruption("PD transfer buffer has " + std::to_string(r.left()) +
                              " trailing bytes");
  }
  return st;
}

void ApplyHandoffFault(Fault fault, cpu::SequenceState* state) {
  if (fault != Fault::kPdHandoffLosesState && fault != Fault::kCompressorStateNotRestored) return;
  const auto zero = [](std::vector<float>& v) { std::fill(v.begin(), v.end(), 0.0f); };
  for (cpu::SequenceLayerState& ls : state->layers) {
    if (fault == Fault::kPdHandoffLosesState) {
      zero(ls.compressed);
      zero(ls.index_keys);
    } else {
      zero(ls.kv_state_kv);
      zero(ls.kv_state_score);
      zero(ls.index_state_kv);
      zero(ls.index_state_score);
    }
  }
}

std::vector<uint8_t> ExportTransfer(const ModelConfig& cfg, const cpu::Sequence& seq) {
  return SerializeDecodeState(cfg, seq.ExportState());
}

Status ImportTransfer(const ModelConfig& cfg, std::span<const uint8_t> bytes, cpu::Sequence* seq) {
  auto st = DeserializeDecodeState(cfg, bytes);
  if (!st.ok()) return st.status();
  return seq->ImportState(*st);
}

}  // namespace nw::parallel
