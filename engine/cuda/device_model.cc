#include "engine/cuda/device_model.h"

#include <cstring>
#include <utility>

#include "kernels/cpu/rope.h"
#include "kernels/quant/scalar.h"

namespace nw::cuda {
namespace {

// The bf16 pieces of `n` floats: one piece (the bits) when every value is a bf16 value (low 16 bits
// zero), else three pieces, piece-major, hi = bf16(v), mid = bf16(v - hi), lo = bf16(v - hi - mid),
// whose sum is v exactly.
std::vector<uint16_t> Bf16Pieces(const float* data, size_t n, int* pieces) {
  bool exact = true;
  for (size_t i = 0; i < n && exact; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i, sizeof(bits));
    exact = (bits & 0xFFFFu) == 0;
  }
  *pieces = exact ? 1 : 3;
  std::vector<uint16_t> out(n * static_cast<size_t>(*pieces));
  for (size_t i = 0; i < n; ++i) {
    float r = data[i];
    for (int k = 0; k < *pieces; ++k) {
      const uint16_t b = quant::FloatToBf16Bits(r);
      out[static_cast<size_t>(k) * n + i] = b;
      r -= quant::Bf16BitsToFloat(b);
    }
  }
  return out;
}

class Uploader {
 public:
  explicit Uploader(std::map<const float*, DeviceModel::Bf16Weight>* copies) : copies_(copies) {}

  Result<DevTensor> Tensor(const nw::Tensor& t) { return Floats(t.data.data(), t.data.size()); }

  // A linear weight: fp32, and its bf16 pieces when asked for.
  Result<DevTensor> Linear(const nw::Tensor& t) {
    NW_ASSIGN_OR_RETURN(DevTensor d, Tensor(t));
    NW_RETURN_IF_ERROR(Copy(d, t.data.data(), t.data.size()));
    return d;
  }

  Status Copy(const DevTensor& d, const float* data, size_t n) {
    if (copies_ == nullptr || n == 0) return Status::Ok();
    DeviceModel::Bf16Weight c;
    const std::vector<uint16_t> bits = Bf16Pieces(data, n, &c.pieces);
    c.piece_stride = static_cast<int64_t>(n);
    NW_ASSIGN_OR_RETURN(c.bits, DeviceBuffer<uint16_t>::Allocate(bits.size()));
    NW_RETURN_IF_ERROR(c.bits.CopyFromHost(bits.data(), bits.size()));
    bytes += static_cast<int64_t>(bits.size() * sizeof(uint16_t));
    copies_->emplace(d.data(), std::move(c));
    return Status::Ok();
  }

  Result<DevTensor> Floats(const float* data, size_t n) {
    NW_ASSIGN_OR_RETURN(DevTensor d, DevTensor::Allocate(n));
    if (n > 0) NW_RETURN_IF_ERROR(d.CopyFromHost(data, n));
    bytes += static_cast<int64_t>(n * sizeof(float));
    return d;
  }

  Result<DevHc> Hc(const HcWeights& h) {
    DevHc d;
    NW_ASSIGN_OR_RETURN(d.fn, Linear(h.fn));
    NW_ASSIGN_OR_RETURN(d.base, Tensor(h.base));
    NW_ASSIGN_OR_RETURN(d.scale, Tensor(h.scale));
    return d;
  }

  Result<DevCompressor> Compressor(const CompressorWeights& c) {
    DevCompressor d;
    d.ratio = c.ratio;
    d.dim = c.dim;
    NW_ASSIGN_OR_RETURN(d.wkv, Linear(c.wkv));
    NW_ASSIGN_OR_RETURN(d.wgate, Linear(c.wgate));
    NW_ASSIGN_OR_RETURN(d.ape, Tensor(c.ape));
    NW_ASSIGN_OR_RETURN(d.norm, Tensor(c.norm));
    return d;
  }

  // The experts' `which` matrices (0: w1, 1: w3, 2: w2) concatenated in expert order.
  Result<DevTensor> Experts(const std::vector<ExpertWeights>& experts, int which) {
    auto pick = [which](const ExpertWeights& e) -> const nw::Tensor& {
      return which == 0 ? e.w1 : (which == 1 ? e.w3 : e.w2);
    };
    size_t per = experts.empty() ? 0 : pick(experts.front()).data.size();
    std::vector<float> all;
    all.reserve(per * experts.size());
    for (const ExpertWeights& e : experts) {
      const std::vector<float>& v = pick(e).data;
      all.insert(all.end(), v.begin(), v.begin() + static_cast<int64_t>(per));
    }
    NW_ASSIGN_OR_RETURN(DevTensor d, Floats(all.data(), all.size()));
    NW_RETURN_IF_ERROR(Copy(d, all.data(), all.size()));
    return d;
  }

  int64_t bytes = 0;

 private:
  std::map<const float*, DeviceModel::Bf16Weight>* copies_;
};

}  // namespace

Result<DeviceModel> DeviceModel::Upload(const ModelConfig& cfg, const ModelWeights& w,
                                        bool bf16_copies) {
  DeviceModel m;
  Uploader up(bf16_copies ? &m.bf16_copies : nullptr);
  NW_ASSIGN_OR_RETURN(m.embed, up.Tensor(w.embed));
  NW_ASSIGN_OR_RETURN(m.norm, up.Tensor(w.norm));
  NW_ASSIGN_OR_RETURN(m.head, up.Linear(w.head));
  NW_ASSIGN_OR_RETURN(m.hc_head, up.Hc(w.hc_head));
  for (int l = 0; l < cfg.n_layers; ++l) {
    const BlockWeights& b = w.layers[static_cast<size_t>(l)];
    DevLayer d;
    NW_ASSIGN_OR_RETURN(d.hc_attn, up.Hc(b.hc_attn));
    NW_ASSIGN_OR_RETURN(d.hc_ffn, up.Hc(b.hc_ffn));
    NW_ASSIGN_OR_RETURN(d.attn_norm, up.Tensor(b.attn_norm));
    NW_ASSIGN_OR_RETURN(d.ffn_norm, up.Tensor(b.ffn_norm));
    const AttentionWeights& a = b.attn;
    NW_ASSIGN_OR_RETURN(d.attn_sink, up.Tensor(a.attn_sink));
    NW_ASSIGN_OR_RETURN(d.wq_a, up.Linear(a.wq_a));
    NW_ASSIGN_OR_RETURN(d.q_norm, up.Tensor(a.q_norm));
    NW_ASSIGN_OR_RETURN(d.wq_b, up.Linear(a.wq_b));
    NW_ASSIGN_OR_RETURN(d.wkv, up.Linear(a.wkv));
    NW_ASSIGN_OR_RETURN(d.kv_norm, up.Tensor(a.kv_norm));
    NW_ASSIGN_OR_RETURN(d.wo_a, up.Linear(a.wo_a));
    NW_ASSIGN_OR_RETURN(d.wo_b, up.Linear(a.wo_b));
    if (a.compressor) {
      NW_ASSIGN_OR_RETURN(DevCompressor c, up.Compressor(*a.compressor));
      d.compressor = std::move(c);
    }
    if (a.indexer) {
      NW_ASSIGN_OR_RETURN(d.ix_wq_b, up.Linear(a.indexer->wq_b));
      NW_ASSIGN_OR_RETURN(d.ix_weights_proj, up.Linear(a.indexer->weights_proj));
      NW_ASSIGN_OR_RETURN(DevCompressor c, up.Compressor(a.indexer->compressor));
      d.ix_compressor = std::move(c);
    }
    const FfnWeights& f = b.ffn;
    NW_ASSIGN_OR_RETURN(d.gate, up.Linear(f.gate));
    NW_ASSIGN_OR_RETURN(d.gate_bias, up.Tensor(f.gate_bias));
    if (!f.tid2eid.empty()) {
      NW_ASSIGN_OR_RETURN(d.tid2eid, DeviceBuffer<int32_t>::Allocate(f.tid2eid.size()));
      NW_RETURN_IF_ERROR(d.tid2eid.CopyFromHost(f.tid2eid.data(), f.tid2eid.size()));
      up.bytes += static_cast<int64_t>(f.tid2eid.size() * sizeof(int32_t));
    }
    NW_ASSIGN_OR_RETURN(d.w1_all, up.Experts(f.experts, 0));
    NW_ASSIGN_OR_RETURN(d.w3_all, up.Experts(f.experts, 1));
    NW_ASSIGN_OR_RETURN(d.w2_all, up.Experts(f.experts, 2));
    NW_ASSIGN_OR_RETURN(d.sh_w1, up.Linear(f.shared.w1));
    NW_ASSIGN_OR_RETURN(d.sh_w3, up.Linear(f.shared.w3));
    NW_ASSIGN_OR_RETURN(d.sh_w2, up.Linear(f.shared.w2));
    m.layers.push_back(std::move(d));
  }
  m.bytes = up.bytes;
  return m;
}

Result<DeviceRope> DeviceRope::Upload(const ModelConfig& cfg, int64_t rows) {
  cpu::RopeParams plain;
  plain.rope_dim = cfg.rope_head_dim;
  plain.base = cfg.rope_theta;
  plain.original_seq_len = 0;
  cpu::RopeParams yarn = plain;
  yarn.base = cfg.compress_rope_theta;
  yarn.original_seq_len = cfg.original_seq_len;
  yarn.factor = cfg.rope_factor;
  yarn.beta_fast = cfg.beta_fast;
  yarn.beta_slow = cfg.beta_slow;
  const int64_t pairs = cfg.rope_head_dim / 2;
  DeviceRope r;
  r.rows = rows;
  auto upload = [&](const cpu::RopeParams& rp, DevTensor& c, DevTensor& s) -> Status {
    const cpu::RopeTable t(rp, rows);
    const size_t count = static_cast<size_t>(rows * pairs);
    NW_ASSIGN_OR_RETURN(c, DevTensor::Allocate(count));
    NW_ASSIGN_OR_RETURN(s, DevTensor::Allocate(count));
    NW_RETURN_IF_ERROR(c.CopyFromHost(t.cos(0), count));
    return s.CopyFromHost(t.sin(0), count);
  };
  NW_RETURN_IF_ERROR(upload(plain, r.plain_cos, r.plain_sin));
  NW_RETURN_IF_ERROR(upload(yarn, r.comp_cos, r.comp_sin));
  return r;
}

}  // namespace nw::cuda
