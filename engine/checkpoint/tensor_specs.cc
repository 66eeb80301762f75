#include "engine/checkpoint/tensor_specs.h"

#include <utility>

namespace nw {
namespace {

class SpecBuilder {
 public:
  explicit SpecBuilder(std::vector<TensorSpec>* out) : out_(out) {}

  void Add(std::string name, std::vector<int64_t> shape, TensorKind kind, TensorInit init) {
    out_->push_back(TensorSpec{std::move(name), std::move(shape), kind, init, mtp_});
  }
  void set_mtp(bool mtp) { mtp_ = mtp; }

 private:
  std::vector<TensorSpec>* out_;
  bool mtp_ = false;
};

void AddCompressor(SpecBuilder& b, const std::string& p, int ratio, int64_t d, int64_t dim) {
  const int64_t coff = ratio == 4 ? 2 : 1;
  b.Add(p + "wkv.weight", {coff * d, dim}, TensorKind::kDense, TensorInit::kFanIn);
  b.Add(p + "wgate.weight", {coff * d, dim}, TensorKind::kDense, TensorInit::kFanIn);
  b.Add(p + "ape", {ratio, coff * d}, TensorKind::kF32, TensorInit::kSmall);
  b.Add(p + "norm.weight", {d}, TensorKind::kDense, TensorInit::kOnes);
}

// One block (main layer or MTP) with prefix p ("layers.3." / "mtp.0.") and layer id `id`.
void AddBlock(SpecBuilder& b, const ModelConfig& c, const std::string& p, int id) {
  const int64_t D = c.dim, n = c.hc_mult, m = (2 + n) * n, H = c.n_heads, d = c.head_dim,
                q = c.q_lora_rank, g = c.o_groups, R = c.o_lora_rank, E = c.n_routed_experts,
                I = c.moe_inter_dim;
  for (const char* which : {"attn", "ffn"}) {
    const std::string hc = p + "hc_" + which + "_";
    b.Add(hc + "fn", {m, n * D}, TensorKind::kF32, TensorInit::kHcFn);
    b.Add(hc + "base", {m}, TensorKind::kF32, TensorInit::kHcBase);
    b.Add(hc + "scale", {3}, TensorKind::kF32, TensorInit::kOnes);
  }
  b.Add(p + "attn_norm.weight", {D}, TensorKind::kDense, TensorInit::kOnes);
  b.Add(p + "ffn_norm.weight", {D}, TensorKind::kDense, TensorInit::kOnes);

  const std::string a = p + "attn.";
  b.Add(a + "attn_sink", {H}, TensorKind::kF32, TensorInit::kZeros);
  b.Add(a + "wq_a.weight", {q, D}, TensorKind::kLinear, TensorInit::kFanIn);
  b.Add(a + "q_norm.weight", {q}, TensorKind::kDense, TensorInit::kOnes);
  b.Add(a + "wq_b.weight", {H * d, q}, TensorKind::kLinear, TensorInit::kFanIn);
  b.Add(a + "wkv.weight", {d, D}, TensorKind::kLinear, TensorInit::kFanIn);
  b.Add(a + "kv_norm.weight", {d}, TensorKind::kDense, TensorInit::kOnes);
  b.Add(a + "wo_a.weight", {g * R, H * d / g}, TensorKind::kLinear, TensorInit::kFanIn);
  b.Add(a + "wo_b.weight", {D, g * R}, TensorKind::kLinear, TensorInit::kFanIn);
  const int ratio = c.ratio(id);
  if (ratio > 0) AddCompressor(b, a + "compressor.", ratio, d, D);
  if (ratio == 4) {
    const int64_t hI = c.index_n_heads, cI = c.index_head_dim;
    b.Add(a + "indexer.wq_b.weight", {hI * cI, q}, TensorKind::kLinear, TensorInit::kFanIn);
    b.Add(a + "indexer.weights_proj.weight", {hI, D}, TensorKind::kDense, TensorInit::kFanIn);
    AddCompressor(b, a + "indexer.compressor.", 4, cI, D);
  }

  const std::string f = p + "ffn.";
  b.Add(f + "gate.weight", {E, D}, TensorKind::kDense, TensorInit::kFanIn);
  if (c.is_hash_layer(id)) {
    b.Add(f + "gate.tid2eid", {c.vocab_size, c.n_activated_experts}, TensorKind::kTid2eid,
          TensorInit::kTid2eid);
  } else {
    b.Add(f + "gate.bias", {E}, TensorKind::kF32, TensorInit::kZeros);
  }
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = f + "experts." + std::to_string(e) + ".";
    b.Add(x + "w1.weight", {I, D}, TensorKind::kExpertLinear, TensorInit::kFanIn);
    b.Add(x + "w2.weight", {D, I}, TensorKind::kExpertLinear, TensorInit::kFanIn);
    b.Add(x + "w3.weight", {I, D}, TensorKind::kExpertLinear, TensorInit::kFanIn);
  }
  b.Add(f + "shared_experts.w1.weight", {I, D}, TensorKind::kLinear, TensorInit::kFanIn);
  b.Add(f + "shared_experts.w2.weight", {D, I}, TensorKind::kLinear, TensorInit::kFanIn);
  b.Add(f + "shared_experts.w3.weight", {I, D}, TensorKind::kLinear, TensorInit::kFanIn);
}

void AddHcHead(SpecBuilder& b, const ModelConfig& c, const std::string& p) {
  const int64_t n = c.hc_mult, D = c.dim;
  b.Add(p + "hc_head_fn", {n, n * D}, TensorKind::kF32, TensorInit::kHcFn);
  b.Add(p + "hc_head_base", {n}, TensorKind::kF32, TensorInit::kHcBase);
  b.Add(p + "hc_head_scale", {1}, TensorKind::kF32, TensorInit::kOnes);
}

}  // namespace

std::vector<TensorSpec> CheckpointTensorSpecs(const ModelConfig& c) {
  std::vector<TensorSpec> out;
  SpecBuilder b(&out);
  const int64_t V = c.vocab_size, D = c.dim;
  b.Add("embed.weight", {V, D}, TensorKind::kDense, TensorInit::kFanIn);
  b.Add("norm.weight", {D}, TensorKind::kDense, TensorInit::kOnes);
  b.Add("head.weight", {V, D}, TensorKind::kDense, TensorInit::kFanIn);
  AddHcHead(b, c, "");
  for (int i = 0; i < c.n_layers; ++i) AddBlock(b, c, "layers." + std::to_string(i) + ".", i);
  b.set_mtp(true);
  for (int j = 0; j < c.n_mtp_layers; ++j) {
    const std::string p = "mtp." + std::to_string(j) + ".";
    AddBlock(b, c, p, c.n_layers + j);
    b.Add(p + "e_proj.weight", {D, D}, TensorKind::kLinear, TensorInit::kFanIn);
    b.Add(p + "h_proj.weight", {D, D}, TensorKind::kLinear, TensorInit::kFanIn);
    b.Add(p + "enorm.weight", {D}, TensorKind::kDense, TensorInit::kOnes);
    b.Add(p + "hnorm.weight", {D}, TensorKind::kDense, TensorInit::kOnes);
    b.Add(p + "norm.weight", {D}, TensorKind::kDense, TensorInit::kOnes);
    AddHcHead(b, c, p);
  }
  return out;
}

bool IsLinearKind(TensorKind k) {
  return k == TensorKind::kLinear || k == TensorKind::kExpertLinear;
}

std::string ScaleName(const std::string& weight_name) {
  constexpr std::string_view kSuffix = ".weight";
  if (weight_name.ends_with(kSuffix)) {
    return weight_name.substr(0, weight_name.size() - kSuffix.size()) + ".scale";
  }
  return weight_name + ".scale";
}

bool IsIgnoredAlias(const std::string& name, const ModelConfig& cfg) {
  for (int j = 0; j < cfg.n_mtp_layers; ++j) {
    const std::string p = "mtp." + std::to_string(j) + ".";
    if (name == p + "emb.tok_emb.weight" || name == p + "embed.weight" ||
        name == p + "head.weight") {
      return true;
    }
  }
  return false;
}

}  // namespace nw
