#include "engine/checkpoint/loader.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/checkpoint/tensor_specs.h"
#include "kernels/quant/quant.h"

namespace nw {
namespace {

std::string Q(const std::string& s) { return "'" + s + "'"; }

bool IsFloatDtype(StDtype d) {
  return d == StDtype::kF32 || d == StDtype::kBF16 || d == StDtype::kF16;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

Status Err(const SafetensorsArchive& a, const std::string& tensor, const std::string& what) {
  return Status::Corruption(a.source() + ": tensor " + Q(tensor) + ": " + what);
}

Result<const StTensor*> Need(const SafetensorsArchive& a, const std::string& name) {
  const StTensor* t = a.Find(name);
  if (!t) return Status::NotFound(a.source() + ": missing tensor " + Q(name));
  return t;
}

Status CheckShape(const SafetensorsArchive& a, const StTensor& t,
                  const std::vector<int64_t>& want) {
  if (t.shape != want) {
    return Err(a, t.name,
               "shape " + ShapeToString(t.shape) + " != expected " + ShapeToString(want) +
                   " (dtype " + std::string(StDtypeName(t.dtype)) + ")");
  }
  return Status::Ok();
}

// Decodes BF16/F16/F32 bytes (any alignment) into floats.
void DecodeFloats(const StTensor& t, float* out) {
  const uint8_t* p = t.bytes.data();
  const size_t n = static_cast<size_t>(t.numel());
  switch (t.dtype) {
    case StDtype::kF32:
      std::memcpy(out, p, n * sizeof(float));
      break;
    case StDtype::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        out[i] = quant::Bf16BitsToFloat(b);
      }
      break;
    case StDtype::kF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        out[i] = HalfBitsToFloat(b);
      }
      break;
    default:
      break;
  }
}

// The F8_E8M0 scale of a quantized linear: dtype, shape, no NaN byte.
Result<const StTensor*> NeedScale(const SafetensorsArchive& a, const std::string& weight_name,
                                  const std::vector<int64_t>& want) {
  const std::string name = ScaleName(weight_name);
  const StTensor* s = a.Find(name);
  if (!s) {
    return Status::NotFound(a.source() + ": missing tensor " + Q(name) + " (the scale of " +
                            Q(weight_name) + ")");
  }
  if (s->dtype != StDtype::kF8E8M0) {
    return Err(a, name, "dtype " + std::string(StDtypeName(s->dtype)) + " != expected F8_E8M0");
  }
  NW_RETURN_IF_ERROR(CheckShape(a, *s, want));
  for (size_t i = 0; i < s->bytes.size(); ++i) {
    if (s->bytes[i] == 0xFF) {
      return Err(a, name, "scale byte 0xFF (NaN) at element " + std::to_string(i));
    }
  }
  return s;
}

// Checks (and, when `out` is non-null, decodes) a linear weight. Adds the consumed scale name.
// A NaN or infinity in a weight makes every answer that touches it meaningless (and a "miss"
// that says nothing about retrieval): refused at load, naming the tensor and the element.
Status CheckFinite(const SafetensorsArchive& a, const std::string& name, const Tensor& t) {
  const float* p = t.ptr();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (!std::isfinite(p[i])) {
      return Err(a, name,
                 std::string(std::isnan(p[i]) ? "NaN" : "infinite") + " value at element " +
                     std::to_string(i) + " (weights must be finite)");
    }
  }
  return Status::Ok();
}

Status LoadLinear(const SafetensorsArchive& a, const std::string& name, int64_t rows, int64_t cols,
                  Tensor* out, std::set<std::string>* used_scales) {
  NW_ASSIGN_OR_RETURN(const StTensor* w, Need(a, name));
  const std::string scale_name = ScaleName(name);
  if (IsFloatDtype(w->dtype)) {
    NW_RETURN_IF_ERROR(CheckShape(a, *w, {rows, cols}));
    if (a.Contains(scale_name)) {
      return Err(a, scale_name,
                 "unexpected scale: " + Q(name) + " is " + std::string(StDtypeName(w->dtype)) +
                     ", not a quantized dtype");
    }
    if (out) {
      *out = Tensor({rows, cols});
      DecodeFloats(*w, out->ptr());
      NW_RETURN_IF_ERROR(CheckFinite(a, name, *out));
    }
    return Status::Ok();
  }
  if (w->dtype == StDtype::kF8E4M3) {
    NW_RETURN_IF_ERROR(CheckShape(a, *w, {rows, cols}));
    NW_ASSIGN_OR_RETURN(const StTensor* s,
                        NeedScale(a, name, {CeilDiv(rows, 128), CeilDiv(cols, 128)}));
    used_scales->insert(scale_name);
    for (size_t i = 0; i < w->bytes.size(); ++i) {
      if ((w->bytes[i] & 0x7F) == 0x7F) {
        return Err(a, name, "e4m3 NaN byte at element " + std::to_string(i));
      }
    }
    if (out) {
      *out = Tensor({rows, cols});
      quant::DequantFp8Weight(w->bytes.data(), s->bytes.data(), rows, cols, out->ptr());
    }
    return Status::Ok();
  }
  if (w->dtype == StDtype::kI8 || w->dtype == StDtype::kU8 || w->dtype == StDtype::kF4) {
    if (cols % 32 != 0) {
      return Err(a, name,
                 "FP4 weight needs an input dim divisible by 32, expected shape is " +
                     ShapeToString({rows, cols}));
    }
    const std::vector<int64_t> disk = w->dtype == StDtype::kF4
                                          ? std::vector<int64_t>{rows, cols}
                                          : std::vector<int64_t>{rows, cols / 2};
    NW_RETURN_IF_ERROR(CheckShape(a, *w, disk));
    NW_ASSIGN_OR_RETURN(const StTensor* s, NeedScale(a, name, {rows, cols / 32}));
    used_scales->insert(scale_name);
    if (out) {
      *out = Tensor({rows, cols});
      quant::DequantFp4Weight(w->bytes.data(), s->bytes.data(), rows, cols, out->ptr());
    }
    return Status::Ok();
  }
  return Err(a, name,
             "dtype " + std::string(StDtypeName(w->dtype)) +
                 " is not a linear weight format (BF16, F16, F32, F8_E4M3, I8/U8/F4 FP4)");
}

Status LoadPlain(const SafetensorsArchive& a, const TensorSpec& spec, Tensor* out) {
  NW_ASSIGN_OR_RETURN(const StTensor* t, Need(a, spec.name));
  if (!IsFloatDtype(t->dtype)) {
    return Err(a, spec.name,
               "dtype " + std::string(StDtypeName(t->dtype)) + " != expected " +
                   (spec.kind == TensorKind::kF32 ? "F32" : "BF16") + " (or F16/F32/BF16)");
  }
  NW_RETURN_IF_ERROR(CheckShape(a, *t, spec.shape));
  if (out) {
    *out = Tensor(spec.shape);
    DecodeFloats(*t, out->ptr());
    NW_RETURN_IF_ERROR(CheckFinite(a, spec.name, *out));
  }
  return Status::Ok();
}

Status LoadTid2eid(const SafetensorsArchive& a, const TensorSpec& spec, int n_experts,
                   std::vector<int32_t>* out) {
  NW_ASSIGN_OR_RETURN(const StTensor* t, Need(a, spec.name));
  if (t->dtype != StDtype::kI64 && t->dtype != StDtype::kI32) {
    return Err(a, spec.name,
               "dtype " + std::string(StDtypeName(t->dtype)) + " != expected I64 (or I32)");
  }
  NW_RETURN_IF_ERROR(CheckShape(a, *t, spec.shape));
  const int64_t rows = spec.shape[0], k = spec.shape[1];
  std::vector<int32_t> ids(static_cast<size_t>(rows * k));
  for (int64_t i = 0; i < rows * k; ++i) {
    int64_t v;
    if (t->dtype == StDtype::kI64) {
      std::memcpy(&v, t->bytes.data() + 8 * i, 8);
    } else {
      int32_t v32;
      std::memcpy(&v32, t->bytes.data() + 4 * i, 4);
      v = v32;
    }
    if (v < 0 || v >= n_experts) {
      return Err(a, spec.name,
                 "expert id " + std::to_string(v) + " at token " + std::to_string(i / k) +
                     " is outside [0, " + std::to_string(n_experts) + ")");
    }
    ids[static_cast<size_t>(i)] = static_cast<int32_t>(v);
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t x = 0; x < k; ++x) {
      for (int64_t y = x + 1; y < k; ++y) {
        if (ids[static_cast<size_t>(r * k + x)] == ids[static_cast<size_t>(r * k + y)]) {
          return Err(a, spec.name,
                     "token " + std::to_string(r) + " lists expert " +
                         std::to_string(ids[static_cast<size_t>(r * k + x)]) + " twice");
        }
      }
    }
  }
  if (out) *out = std::move(ids);
  return Status::Ok();
}

// Calls f(tensor, shipped_quantized) for every linear-like matrix of the model.
template <typename W, typename F>
void ForEachLinear(W& w, F&& f) {
  f(w.embed, false);
  f(w.head, false);
  for (auto& l : w.layers) {
    auto& at = l.attn;
    for (Tensor* t : {&at.wq_a, &at.wq_b, &at.wkv, &at.wo_a, &at.wo_b}) f(*t, true);
    if (at.compressor) {
      f(at.compressor->wkv, false);
      f(at.compressor->wgate, false);
    }
    if (at.indexer) {
      f(at.indexer->wq_b, true);
      f(at.indexer->weights_proj, false);
      f(at.indexer->compressor.wkv, false);
      f(at.indexer->compressor.wgate, false);
    }
    f(l.ffn.gate, false);
    for (auto& e : l.ffn.experts) {
      for (Tensor* t : {&e.w1, &e.w2, &e.w3}) f(*t, true);
    }
    for (Tensor* t : {&l.ffn.shared.w1, &l.ffn.shared.w2, &l.ffn.shared.w3}) f(*t, true);
  }
}

void FakeQuantFp8Blocks(Tensor& t) {
  const int64_t rows = t.dim(0), cols = t.dim(1);
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols));
  std::vector<uint8_t> scales(static_cast<size_t>(CeilDiv(rows, 128) * CeilDiv(cols, 128)));
  quant::QuantizeFp8Weight(t.ptr(), rows, cols, bytes.data(), scales.data());
  quant::DequantFp8Weight(bytes.data(), scales.data(), rows, cols, t.ptr());
}

}  // namespace

float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: mant * 2^-24, exact in float
      float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
      std::memcpy(&bits, &v, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

Result<Tensor> LoadLinearWeight(const SafetensorsArchive& archive, const std::string& weight_name,
                                int64_t out, int64_t in) {
  Tensor t;
  std::set<std::string> used;
  NW_RETURN_IF_ERROR(LoadLinear(archive, weight_name, out, in, &t, &used));
  return t;
}

Result<ModelWeights> LoadModelWeights(const SafetensorsArchive& archive, const ModelConfig& cfg) {
  if (Status s = cfg.Validate(); !s.ok()) return s.WithContext(archive.source());
  const std::vector<TensorSpec> specs = CheckpointTensorSpecs(cfg);

  // Every archive tensor must be planned, a scale, or an ignored alias. Scales are checked after
  // their weights (a scale whose weight is not quantized is reported there).
  std::set<std::string> planned;
  for (const TensorSpec& s : specs) planned.insert(s.name);
  for (const std::string& name : archive.Names()) {
    if (planned.count(name) || IsIgnoredAlias(name, cfg)) continue;
    if (name.ends_with(".scale")) {
      const std::string weight = name.substr(0, name.size() - 6) + ".weight";
      if (planned.count(weight)) continue;
    }
    return Status::Corruption(archive.source() + ": unexpected tensor " + Q(name));
  }

  std::map<std::string, Tensor> loaded;
  std::map<std::string, std::vector<int32_t>> ids;
  std::set<std::string> used_scales;
  for (const TensorSpec& s : specs) {
    Tensor t;
    Tensor* out = s.mtp ? nullptr : &t;
    if (IsLinearKind(s.kind)) {
      NW_RETURN_IF_ERROR(LoadLinear(archive, s.name, s.shape[0], s.shape[1], out, &used_scales));
    } else if (s.kind == TensorKind::kTid2eid) {
      std::vector<int32_t> v;
      NW_RETURN_IF_ERROR(LoadTid2eid(archive, s, cfg.n_routed_experts, s.mtp ? nullptr : &v));
      if (!s.mtp) ids[s.name] = std::move(v);
      continue;
    } else {
      NW_RETURN_IF_ERROR(LoadPlain(archive, s, out));
    }
    if (!s.mtp) loaded[s.name] = std::move(t);
  }
  for (const std::string& name : archive.Names()) {
    if (name.ends_with(".scale") && !planned.count(name) && !used_scales.count(name)) {
      return Status::Corruption(archive.source() + ": unexpected tensor " + Q(name) +
                                " (its weight is not quantized)");
    }
  }

  auto take = [&](const std::string& name) {
    auto it = loaded.find(name);
    Tensor t = std::move(it->second);
    loaded.erase(it);
    return t;
  };
  auto take_hc = [&](const std::string& p) {
    HcWeights h;
    h.fn = take(p + "fn");
    h.base = take(p + "base");
    h.scale = take(p + "scale");
    return h;
  };
  auto take_compressor = [&](const std::string& p, int ratio, int dim) {
    CompressorWeights c;
    c.ratio = ratio;
    c.dim = dim;
    c.wkv = take(p + "wkv.weight");
    c.wgate = take(p + "wgate.weight");
    c.ape = take(p + "ape");
    c.norm = take(p + "norm.weight");
    return c;
  };

  ModelWeights w;
  w.embed = take("embed.weight");
  w.norm = take("norm.weight");
  w.head = take("head.weight");
  w.hc_head = take_hc("hc_head_");
  w.layers.resize(static_cast<size_t>(cfg.n_layers));
  for (int i = 0; i < cfg.n_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    BlockWeights& b = w.layers[static_cast<size_t>(i)];
    b.hc_attn = take_hc(p + "hc_attn_");
    b.hc_ffn = take_hc(p + "hc_ffn_");
    b.attn_norm = take(p + "attn_norm.weight");
    b.ffn_norm = take(p + "ffn_norm.weight");
    const std::string a = p + "attn.";
    b.attn.attn_sink = take(a + "attn_sink");
    b.attn.wq_a = take(a + "wq_a.weight");
    b.attn.q_norm = take(a + "q_norm.weight");
    b.attn.wq_b = take(a + "wq_b.weight");
    b.attn.wkv = take(a + "wkv.weight");
    b.attn.kv_norm = take(a + "kv_norm.weight");
    b.attn.wo_a = take(a + "wo_a.weight");
    b.attn.wo_b = take(a + "wo_b.weight");
    const int ratio = cfg.ratio(i);
    if (ratio > 0) b.attn.compressor = take_compressor(a + "compressor.", ratio, cfg.head_dim);
    if (ratio == 4) {
      IndexerWeights ix;
      ix.wq_b = take(a + "indexer.wq_b.weight");
      ix.weights_proj = take(a + "indexer.weights_proj.weight");
      ix.compressor = take_compressor(a + "indexer.compressor.", 4, cfg.index_head_dim);
      b.attn.indexer = std::move(ix);
    }
    const std::string f = p + "ffn.";
    b.ffn.gate = take(f + "gate.weight");
    if (cfg.is_hash_layer(i)) {
      b.ffn.tid2eid = std::move(ids[f + "gate.tid2eid"]);
    } else {
      b.ffn.gate_bias = take(f + "gate.bias");
    }
    b.ffn.experts.resize(static_cast<size_t>(cfg.n_routed_experts));
    for (int e = 0; e < cfg.n_routed_experts; ++e) {
      const std::string x = f + "experts." + std::to_string(e) + ".";
      ExpertWeights& ew = b.ffn.experts[static_cast<size_t>(e)];
      ew.w1 = take(x + "w1.weight");
      ew.w2 = take(x + "w2.weight");
      ew.w3 = take(x + "w3.weight");
    }
    b.ffn.shared.w1 = take(f + "shared_experts.w1.weight");
    b.ffn.shared.w2 = take(f + "shared_experts.w2.weight");
    b.ffn.shared.w3 = take(f + "shared_experts.w3.weight");
  }
  if (!loaded.empty()) {
    return Status::Internal("checkpoint loader left tensor " + Q(loaded.begin()->first) +
                            " unassigned");
  }
  return w;
}

ModelWeights RequantizeWeights(const ModelWeights& weights, NumFormat weights_format) {
  ModelWeights w = weights;
  if (weights_format == NumFormat::kFp32) return w;
  ForEachLinear(w, [&](Tensor& t, bool shipped_quantized) {
    if (t.empty()) return;
    if (weights_format == NumFormat::kBf16 || !shipped_quantized) {
      quant::FakeQuantBf16(t.ptr(), t.ptr(), static_cast<size_t>(t.numel()));
      return;
    }
    switch (weights_format) {
      case NumFormat::kFp8:
        FakeQuantFp8Blocks(t);
        break;
      case NumFormat::kMxfp4:
        quant::FakeQuantMxfp4(t.ptr(), t.ptr(), static_cast<size_t>(t.numel()));
        break;
      case NumFormat::kNvfp4:
        quant::FakeQuantNvfp4(t.ptr(), t.ptr(), static_cast<size_t>(t.numel()));
        break;
      default:
        break;
    }
  });
  return w;
}

}  // namespace nw
