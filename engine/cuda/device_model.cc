#include "engine/cuda/device_model.h"

#include <utility>

#include "kernels/cpu/rope.h"

namespace nw::cuda {
namespace {

class Uploader {
 public:
  Result<DevTensor> Tensor(const nw::Tensor& t) { return Floats(t.data.data(), t.data.size()); }

  Result<DevTensor> Floats(const float* data, size_t n) {
    NW_ASSIGN_OR_RETURN(DevTensor d, DevTensor::Allocate(n));
    if (n > 0) NW_RETURN_IF_ERROR(d.CopyFromHost(data, n));
    bytes += static_cast<int64_t>(n * sizeof(float));
    return d;
  }

  Result<DevHc> Hc(const HcWeights& h) {
    DevHc d;
    NW_ASSIGN_OR_RETURN(d.fn, Tensor(h.fn));
    NW_ASSIGN_OR_RETURN(d.base, Tensor(h.base));
    NW_ASSIGN_OR_RETURN(d.scale, Tensor(h.scale));
    return d;
  }

  Result<DevCompressor> Compressor(const CompressorWeights& c) {
    DevCompressor d;
    d.ratio = c.ratio;
    d.dim = c.dim;
    NW_ASSIGN_OR_RETURN(d.wkv, Tensor(c.wkv));
    NW_ASSIGN_OR_RETURN(d.wgate, Tensor(c.wgate));
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
    NW_ASSIGN_OR_RETURN(DevTensor d, DevTensor::Allocate(per * experts.size()));
    for (size_t e = 0; e < experts.size(); ++e) {
      NW_RETURN_IF_ERROR(d.CopyFromHost(pick(experts[e]).data.data(), per, e * per));
    }
    bytes += static_cast<int64_t>(per * experts.size() * sizeof(float));
    return d;
  }

  int64_t bytes = 0;
};

}  // namespace

Result<DeviceModel> DeviceModel::Upload(const ModelConfig& cfg, const ModelWeights& w) {
  Uploader up;
  DeviceModel m;
  NW_ASSIGN_OR_RETURN(m.embed, up.Tensor(w.embed));
  NW_ASSIGN_OR_RETURN(m.norm, up.Tensor(w.norm));
  NW_ASSIGN_OR_RETURN(m.head, up.Tensor(w.head));
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
    NW_ASSIGN_OR_RETURN(d.wq_a, up.Tensor(a.wq_a));
    NW_ASSIGN_OR_RETURN(d.q_norm, up.Tensor(a.q_norm));
    NW_ASSIGN_OR_RETURN(d.wq_b, up.Tensor(a.wq_b));
    NW_ASSIGN_OR_RETURN(d.wkv, up.Tensor(a.wkv));
    NW_ASSIGN_OR_RETURN(d.kv_norm, up.Tensor(a.kv_norm));
    NW_ASSIGN_OR_RETURN(d.wo_a, up.Tensor(a.wo_a));
    NW_ASSIGN_OR_RETURN(d.wo_b, up.Tensor(a.wo_b));
    if (a.compressor) {
      NW_ASSIGN_OR_RETURN(DevCompressor c, up.Compressor(*a.compressor));
      d.compressor = std::move(c);
    }
    if (a.indexer) {
      NW_ASSIGN_OR_RETURN(d.ix_wq_b, up.Tensor(a.indexer->wq_b));
      NW_ASSIGN_OR_RETURN(d.ix_weights_proj, up.Tensor(a.indexer->weights_proj));
      NW_ASSIGN_OR_RETURN(DevCompressor c, up.Compressor(a.indexer->compressor));
      d.ix_compressor = std::move(c);
    }
    const FfnWeights& f = b.ffn;
    NW_ASSIGN_OR_RETURN(d.gate, up.Tensor(f.gate));
    NW_ASSIGN_OR_RETURN(d.gate_bias, up.Tensor(f.gate_bias));
    if (!f.tid2eid.empty()) {
      NW_ASSIGN_OR_RETURN(d.tid2eid, DeviceBuffer<int32_t>::Allocate(f.tid2eid.size()));
      NW_RETURN_IF_ERROR(d.tid2eid.CopyFromHost(f.tid2eid.data(), f.tid2eid.size()));
      up.bytes += static_cast<int64_t>(f.tid2eid.size() * sizeof(int32_t));
    }
    NW_ASSIGN_OR_RETURN(d.w1_all, up.Experts(f.experts, 0));
    NW_ASSIGN_OR_RETURN(d.w3_all, up.Experts(f.experts, 1));
    NW_ASSIGN_OR_RETURN(d.w2_all, up.Experts(f.experts, 2));
    NW_ASSIGN_OR_RETURN(d.sh_w1, up.Tensor(f.shared.w1));
    NW_ASSIGN_OR_RETURN(d.sh_w3, up.Tensor(f.shared.w3));
    NW_ASSIGN_OR_RETURN(d.sh_w2, up.Tensor(f.shared.w2));
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
