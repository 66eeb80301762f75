#include "engine/checkpoint/loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint_test_util.h"
#include "common/sha256.h"
#include "engine/checkpoint/random_checkpoint.h"
#include "engine/checkpoint/tensor_specs.h"
#include "kernels/quant/quant.h"

namespace nw {
namespace {

using ::testing::HasSubstr;
using testing_util::ConfigPath;
using testing_util::TempDir;

constexpr uint64_t kSeed = 1234;

ModelConfig TinyConfig(const char* name) {
  Result<ModelConfig> c = LoadModelConfig(ConfigPath(name));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

// Every fp32 tensor of the loaded model, keyed by its on-disk name.
std::map<std::string, const Tensor*> ByName(const ModelWeights& w, const ModelConfig& c) {
  std::map<std::string, const Tensor*> m;
  m["embed.weight"] = &w.embed;
  m["norm.weight"] = &w.norm;
  m["head.weight"] = &w.head;
  m["hc_head_fn"] = &w.hc_head.fn;
  m["hc_head_base"] = &w.hc_head.base;
  m["hc_head_scale"] = &w.hc_head.scale;
  for (int i = 0; i < c.n_layers; ++i) {
    const BlockWeights& b = w.layers[static_cast<size_t>(i)];
    const std::string p = "layers." + std::to_string(i) + ".";
    for (auto [name, h] : {std::pair{"attn", &b.hc_attn}, std::pair{"ffn", &b.hc_ffn}}) {
      m[p + "hc_" + name + "_fn"] = &h->fn;
      m[p + "hc_" + name + "_base"] = &h->base;
      m[p + "hc_" + name + "_scale"] = &h->scale;
    }
    m[p + "attn_norm.weight"] = &b.attn_norm;
    m[p + "ffn_norm.weight"] = &b.ffn_norm;
    const std::string a = p + "attn.";
    m[a + "attn_sink"] = &b.attn.attn_sink;
    m[a + "wq_a.weight"] = &b.attn.wq_a;
    m[a + "q_norm.weight"] = &b.attn.q_norm;
    m[a + "wq_b.weight"] = &b.attn.wq_b;
    m[a + "wkv.weight"] = &b.attn.wkv;
    m[a + "kv_norm.weight"] = &b.attn.kv_norm;
    m[a + "wo_a.weight"] = &b.attn.wo_a;
    m[a + "wo_b.weight"] = &b.attn.wo_b;
    auto add_compressor = [&](const std::string& cp, const CompressorWeights& cw) {
      m[cp + "wkv.weight"] = &cw.wkv;
      m[cp + "wgate.weight"] = &cw.wgate;
      m[cp + "ape"] = &cw.ape;
      m[cp + "norm.weight"] = &cw.norm;
    };
    if (b.attn.compressor) add_compressor(a + "compressor.", *b.attn.compressor);
    if (b.attn.indexer) {
      m[a + "indexer.wq_b.weight"] = &b.attn.indexer->wq_b;
      m[a + "indexer.weights_proj.weight"] = &b.attn.indexer->weights_proj;
      add_compressor(a + "indexer.compressor.", b.attn.indexer->compressor);
    }
    const std::string f = p + "ffn.";
    m[f + "gate.weight"] = &b.ffn.gate;
    if (!b.ffn.gate_bias.empty()) m[f + "gate.bias"] = &b.ffn.gate_bias;
    for (size_t e = 0; e < b.ffn.experts.size(); ++e) {
      const std::string x = f + "experts." + std::to_string(e) + ".";
      m[x + "w1.weight"] = &b.ffn.experts[e].w1;
      m[x + "w2.weight"] = &b.ffn.experts[e].w2;
      m[x + "w3.weight"] = &b.ffn.experts[e].w3;
    }
    m[f + "shared_experts.w1.weight"] = &b.ffn.shared.w1;
    m[f + "shared_experts.w2.weight"] = &b.ffn.shared.w2;
    m[f + "shared_experts.w3.weight"] = &b.ffn.shared.w3;
  }
  return m;
}

// Bitwise float comparison (NaN-safe), reporting the first mismatch.
::testing::AssertionResult SameFloats(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], 4) != 0) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

class LoaderTest : public ::testing::Test {
 protected:
  ModelConfig a_ = TinyConfig("tiny-a.json");
};

TEST_F(LoaderTest, SpecCountsMatchTheSpecTable) {
  struct Want {
    const char* config;
    size_t bf16_tensors, quant_tensors;
    int64_t params, params_no_mtp;
    double bf16_mb, quant_mb;
  };
  for (const Want& w : {Want{"tiny-a.json", 160, 243, 2157630, 1703547, 4.57, 2.57},
                        Want{"tiny-b.json", 383, 667, 25555200, 20973997, 51.8, 22.0}}) {
    const ModelConfig c = TinyConfig(w.config);
    const std::vector<TensorSpec> specs = CheckpointTensorSpecs(c);
    EXPECT_EQ(specs.size(), w.bf16_tensors) << w.config;
    int64_t params = 0, no_mtp = 0;
    std::set<std::string> names;
    for (const TensorSpec& s : specs) {
      // The spec's parameter counts leave out tid2eid (expert ids, not parameters).
      const int64_t n = s.kind == TensorKind::kTid2eid ? 0 : Tensor::Numel(s.shape);
      params += n;
      if (!s.mtp) no_mtp += n;
      EXPECT_TRUE(names.insert(s.name).second) << "duplicate " << s.name;
    }
    EXPECT_EQ(params, w.params) << w.config;
    EXPECT_EQ(no_mtp, w.params_no_mtp) << w.config;
    for (auto layout : {CheckpointLayout::kBf16, CheckpointLayout::kFp8Fp4}) {
      Result<std::vector<StWriteTensor>> t = RandomCheckpointTensors(c, kSeed, layout);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      const bool quant = layout == CheckpointLayout::kFp8Fp4;
      EXPECT_EQ(t->size(), quant ? w.quant_tensors : w.bf16_tensors) << w.config;
      uint64_t bytes = 0;
      for (const StWriteTensor& x : *t) bytes += x.data.size();
      const double mb = static_cast<double>(bytes) / 1e6;
      const double want_mb = quant ? w.quant_mb : w.bf16_mb;
      // The spec table rounds to 3 significant digits.
      EXPECT_NEAR(mb, want_mb, want_mb * 0.002) << w.config << (quant ? " fp8" : " bf16");
    }
  }
}

TEST_F(LoaderTest, Bf16CheckpointLoadsAsRoundedValues) {
  TempDir dir("bf16");
  ASSERT_TRUE(WriteRandomCheckpoint(a_, kSeed, CheckpointLayout::kBf16, dir.path()).ok());
  EXPECT_FALSE(std::filesystem::exists(dir / "tokenizer.json"));
  Result<ModelConfig> cfg = LoadModelConfig(dir.path());
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(*cfg, a_);
  Result<SafetensorsArchive> ar = SafetensorsArchive::Open(dir.path());
  ASSERT_TRUE(ar.ok()) << ar.status().ToString();
  EXPECT_EQ(ar->size(), 160u);
  for (const std::string& n : ar->Names()) EXPECT_FALSE(n.ends_with(".scale")) << n;
  Result<ModelWeights> w = LoadModelWeights(*ar, a_);
  ASSERT_TRUE(w.ok()) << w.status().ToString();

  const auto tensors = ByName(*w, a_);
  size_t checked = 0;
  for (const TensorSpec& s : CheckpointTensorSpecs(a_)) {
    if (s.mtp || s.kind == TensorKind::kTid2eid) continue;
    ASSERT_TRUE(tensors.count(s.name)) << s.name;
    const Tensor& t = *tensors.at(s.name);
    EXPECT_EQ(t.shape, s.shape) << s.name;
    std::vector<float> want = *RandomTensorValues(a_, kSeed, s.name);
    if (s.kind != TensorKind::kF32) {
      for (float& x : want) x = quant::RoundBf16(x);
    }
    EXPECT_TRUE(SameFloats(t.data, want)) << s.name;
    ++checked;
  }
  EXPECT_EQ(checked, tensors.size());

  // Structure: ratio 0 / 4 / 128 and hash routing on layer 0.
  ASSERT_EQ(w->layers.size(), 3u);
  EXPECT_FALSE(w->layers[0].attn.compressor.has_value());
  ASSERT_TRUE(w->layers[1].attn.compressor.has_value());
  EXPECT_EQ(w->layers[1].attn.compressor->ratio, 4);
  EXPECT_EQ(w->layers[1].attn.compressor->dim, 128);
  EXPECT_EQ(w->layers[1].attn.compressor->wkv.shape, (std::vector<int64_t>{256, 128}));
  ASSERT_TRUE(w->layers[1].attn.indexer.has_value());
  EXPECT_EQ(w->layers[1].attn.indexer->compressor.ratio, 4);
  EXPECT_EQ(w->layers[1].attn.indexer->compressor.dim, 64);
  ASSERT_TRUE(w->layers[2].attn.compressor.has_value());
  EXPECT_EQ(w->layers[2].attn.compressor->ratio, 128);
  EXPECT_EQ(w->layers[2].attn.compressor->ape.shape, (std::vector<int64_t>{128, 128}));
  EXPECT_FALSE(w->layers[2].attn.indexer.has_value());
  EXPECT_TRUE(w->layers[0].ffn.gate_bias.empty());
  EXPECT_EQ(w->layers[0].ffn.tid2eid.size(), 1024u * 2);
  EXPECT_TRUE(w->layers[1].ffn.tid2eid.empty());
  EXPECT_EQ(w->layers[1].ffn.gate_bias.shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(w->layers[1].ffn.experts.size(), 4u);
  EXPECT_EQ(w->hc_head.fn.shape, (std::vector<int64_t>{4, 512}));
  EXPECT_EQ(w->layers[0].hc_attn.fn.shape, (std::vector<int64_t>{24, 512}));

  // tid2eid: the drawn ids, k distinct per row, all in [0, E).
  std::vector<float> ids = *RandomTensorValues(a_, kSeed, "layers.0.ffn.gate.tid2eid");
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(w->layers[0].ffn.tid2eid[i], static_cast<int32_t>(ids[i]));
  }
  for (size_t r = 0; r < 1024; ++r) {
    EXPECT_NE(w->layers[0].ffn.tid2eid[2 * r], w->layers[0].ffn.tid2eid[2 * r + 1]);
  }
}

TEST_F(LoaderTest, InitializationFollowsTheDocumentedRules) {
  auto values = [&](const std::string& name) { return *RandomTensorValues(a_, kSeed, name); };
  for (float x : values("layers.0.attn_norm.weight")) ASSERT_EQ(x, 1.0f);
  for (float x : values("layers.0.hc_ffn_scale")) ASSERT_EQ(x, 1.0f);
  for (float x : values("layers.0.attn.attn_sink")) ASSERT_EQ(x, 0.0f);
  for (float x : values("layers.1.ffn.gate.bias")) ASSERT_EQ(x, 0.0f);
  std::vector<float> base = values("layers.0.hc_attn_base");
  ASSERT_EQ(base.size(), 24u);
  EXPECT_FLOAT_EQ(base[0], -std::log(3.0f));  // pre = sigmoid(-log 3) = 1/4
  EXPECT_EQ(base[4], 0.0f);                   // post
  EXPECT_EQ(base[8], 4.0f);                   // comb diagonal
  EXPECT_EQ(base[9], 0.0f);
  EXPECT_EQ(base[8 + 5], 4.0f);
  // [out, in] matrices have std ~ 1/sqrt(in); hc fn is 10x smaller.
  auto stddev = [](const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += static_cast<double>(x) * x;
    return std::sqrt(s / static_cast<double>(v.size()));
  };
  EXPECT_NEAR(stddev(values("layers.0.attn.wq_b.weight")), 1.0 / std::sqrt(128.0), 0.002);
  EXPECT_NEAR(stddev(values("embed.weight")), 1.0 / std::sqrt(128.0), 0.002);
  EXPECT_NEAR(stddev(values("layers.0.hc_attn_fn")), 0.1 / std::sqrt(512.0), 0.0003);
  // Deterministic per seed and name; other seeds and names differ.
  EXPECT_EQ(values("layers.0.attn.wq_a.weight"), values("layers.0.attn.wq_a.weight"));
  EXPECT_NE(values("layers.0.attn.wq_a.weight"),
            *RandomTensorValues(a_, kSeed + 1, "layers.0.attn.wq_a.weight"));
  EXPECT_NE(values("layers.0.ffn.experts.0.w1.weight"), values("layers.0.ffn.experts.1.w1.weight"));
  EXPECT_EQ(RandomTensorValues(a_, kSeed, "nope").status().code(), StatusCode::kNotFound);
}

TEST_F(LoaderTest, RandomCheckpointBytesAreReproducible) {
  TempDir one("repro1"), two("repro2"), three("repro3");
  for (const TempDir* d : {&one, &two}) {
    ASSERT_TRUE(WriteRandomCheckpoint(a_, 7, CheckpointLayout::kFp8Fp4, d->path()).ok());
  }
  ASSERT_TRUE(WriteRandomCheckpoint(a_, 8, CheckpointLayout::kFp8Fp4, three.path()).ok());
  auto sha = [](const std::filesystem::path& p) { return *Sha256File(p); };
  EXPECT_EQ(sha(one / "model.safetensors"), sha(two / "model.safetensors"));
  EXPECT_EQ(sha(one / "config.json"), sha(two / "config.json"));
  EXPECT_NE(sha(one / "model.safetensors"), sha(three / "model.safetensors"));
}

TEST_F(LoaderTest, Fp8Fp4CheckpointDequantizesExactly) {
  TempDir dir("fp8");
  ASSERT_TRUE(WriteRandomCheckpoint(a_, kSeed, CheckpointLayout::kFp8Fp4, dir.path()).ok());
  nlohmann::json cfg_json = nlohmann::json::parse(testing_util::ReadAll(dir / "config.json"));
  EXPECT_EQ(cfg_json["quantization_config"]["quant_method"], "fp8");
  EXPECT_EQ(cfg_json["quantization_config"]["fmt"], "e4m3");
  EXPECT_EQ(cfg_json["quantization_config"]["scale_fmt"], "ue8m0");
  EXPECT_EQ(cfg_json["quantization_config"]["weight_block_size"], nlohmann::json({128, 128}));
  EXPECT_EQ(cfg_json["expert_dtype"], "fp4");
  Result<ModelConfig> cfg = LoadModelConfig(dir.path());
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(*cfg, a_);

  Result<SafetensorsArchive> ar = SafetensorsArchive::Open(dir.path());
  ASSERT_TRUE(ar.ok()) << ar.status().ToString();
  EXPECT_EQ(ar->size(), 243u);
  Result<ModelWeights> w = LoadModelWeights(*ar, a_);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const auto tensors = ByName(*w, a_);
  int fp8 = 0, fp4 = 0;
  for (const TensorSpec& s : CheckpointTensorSpecs(a_)) {
    if (s.mtp || !IsLinearKind(s.kind)) continue;
    const StTensor* disk = ar->Find(s.name);
    const StTensor* scale = ar->Find(ScaleName(s.name));
    ASSERT_NE(disk, nullptr) << s.name;
    ASSERT_NE(scale, nullptr) << s.name;
    EXPECT_EQ(scale->dtype, StDtype::kF8E8M0);
    const int64_t out = s.shape[0], in = s.shape[1];
    std::vector<float> want(static_cast<size_t>(out * in));
    if (s.kind == TensorKind::kExpertLinear) {
      EXPECT_EQ(disk->dtype, StDtype::kI8) << s.name;
      EXPECT_EQ(disk->shape, (std::vector<int64_t>{out, in / 2}));
      EXPECT_EQ(scale->shape, (std::vector<int64_t>{out, in / 32}));
      quant::DequantFp4Weight(disk->bytes.data(), scale->bytes.data(), out, in, want.data());
      ++fp4;
    } else {
      EXPECT_EQ(disk->dtype, StDtype::kF8E4M3) << s.name;
      EXPECT_EQ(disk->shape, s.shape);
      EXPECT_EQ(scale->shape, (std::vector<int64_t>{(out + 127) / 128, (in + 127) / 128}));
      quant::DequantFp8Weight(disk->bytes.data(), scale->bytes.data(), out, in, want.data());
      ++fp8;
    }
    EXPECT_TRUE(SameFloats(tensors.at(s.name)->data, want)) << s.name;
    // And the stored values approximate the drawn ones.
    std::vector<float> drawn = *RandomTensorValues(a_, kSeed, s.name);
    double err = 0, ref = 0;
    for (size_t i = 0; i < drawn.size(); ++i) {
      err += (drawn[i] - want[i]) * (drawn[i] - want[i]);
      ref += drawn[i] * drawn[i];
    }
    EXPECT_LT(err / ref, s.kind == TensorKind::kExpertLinear ? 0.05 : 0.005) << s.name;
  }
  EXPECT_EQ(fp4, 3 * 4 * 3);  // 3 layers x 4 experts x w1/w2/w3
  EXPECT_EQ(fp8, 3 * 8 + 1);  // wq_a wq_b wkv wo_a wo_b + 3 shared per layer, indexer wq_b
  // Non-linear tensors are stored exactly as in the BF16 layout.
  std::vector<float> norm = *RandomTensorValues(a_, kSeed, "layers.1.attn.compressor.ape");
  EXPECT_TRUE(SameFloats(w->layers[1].attn.compressor->ape.data, norm));
}

TEST_F(LoaderTest, ShardedCheckpointEqualsUnsharded) {
  TempDir one("unsharded"), many("sharded");
  ASSERT_TRUE(WriteRandomCheckpoint(a_, kSeed, CheckpointLayout::kFp8Fp4, one.path()).ok());
  ASSERT_TRUE(
      WriteRandomCheckpoint(a_, kSeed, CheckpointLayout::kFp8Fp4, many.path(), 512 * 1024).ok());
  EXPECT_TRUE(std::filesystem::exists(many / "model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(many / "model.safetensors"));
  Result<SafetensorsArchive> a1 = SafetensorsArchive::Open(one.path());
  Result<SafetensorsArchive> a2 = SafetensorsArchive::Open(many.path());
  ASSERT_TRUE(a1.ok() && a2.ok()) << a2.status().ToString();
  EXPECT_GE(a2->files().size(), 5u);
  for (const auto& f : a2->files()) EXPECT_LE(std::filesystem::file_size(f), 512u * 1024);
  Result<ModelWeights> w1 = LoadModelWeights(*a1, a_);
  Result<ModelWeights> w2 = LoadModelWeights(*a2, a_);
  ASSERT_TRUE(w1.ok() && w2.ok()) << w2.status().ToString();
  const auto t1 = ByName(*w1, a_), t2 = ByName(*w2, a_);
  ASSERT_EQ(t1.size(), t2.size());
  for (const auto& [name, t] : t1) {
    EXPECT_EQ(t->shape, t2.at(name)->shape) << name;
    EXPECT_TRUE(SameFloats(t->data, t2.at(name)->data)) << name;
  }
  EXPECT_EQ(w1->layers[0].ffn.tid2eid, w2->layers[0].ffn.tid2eid);
}

// Writes `tensors` as one file, loads it, and returns the error message ("" when it loaded).
std::string LoadError(const ModelConfig& c, const std::vector<StWriteTensor>& tensors) {
  TempDir dir("mutated");
  Status s = WriteSafetensorsFile(dir / "model.safetensors", tensors);
  if (!s.ok()) return "write failed: " + s.ToString();
  Result<SafetensorsArchive> ar = SafetensorsArchive::Open(dir.path());
  if (!ar.ok()) return "open failed: " + ar.status().ToString();
  Result<ModelWeights> w = LoadModelWeights(*ar, c);
  return w.ok() ? std::string() : w.status().message();
}

class MutationTest : public LoaderTest {
 protected:
  void SetUp() override {
    Result<std::vector<StWriteTensor>> t = RandomCheckpointTensors(a_, kSeed, layout());
    ASSERT_TRUE(t.ok());
    base_ = std::move(t).value();
  }
  virtual CheckpointLayout layout() const { return CheckpointLayout::kFp8Fp4; }

  std::vector<StWriteTensor> Without(const std::string& name) const {
    std::vector<StWriteTensor> v;
    for (const StWriteTensor& t : base_) {
      if (t.name != name) v.push_back(t);
    }
    EXPECT_EQ(v.size() + 1, base_.size()) << name;
    return v;
  }
  std::vector<StWriteTensor> Edited(const std::string& name,
                                    const std::function<void(StWriteTensor&)>& edit) const {
    std::vector<StWriteTensor> v = base_;
    bool found = false;
    for (StWriteTensor& t : v) {
      if (t.name == name) {
        edit(t);
        found = true;
      }
    }
    EXPECT_TRUE(found) << name;
    return v;
  }
  std::vector<StWriteTensor> base_;
};

TEST_F(MutationTest, UnchangedLoads) { EXPECT_EQ(LoadError(a_, base_), ""); }

TEST_F(MutationTest, MissingTensors) {
  for (const char* name :
       {"embed.weight", "layers.1.attn.indexer.wq_b.weight", "layers.2.attn.compressor.ape",
        "layers.0.ffn.gate.tid2eid", "layers.1.ffn.gate.bias", "layers.2.ffn.experts.3.w2.weight",
        "hc_head_scale", "mtp.0.e_proj.weight", "mtp.0.hc_head_fn",
        "mtp.0.ffn.experts.0.w1.weight"}) {
    EXPECT_THAT(LoadError(a_, Without(name)),
                HasSubstr(std::string("missing tensor '") + name + "'"));
  }
  EXPECT_THAT(LoadError(a_, Without("layers.0.attn.wq_a.scale")),
              HasSubstr("missing tensor 'layers.0.attn.wq_a.scale' (the scale of "
                        "'layers.0.attn.wq_a.weight')"));
  EXPECT_THAT(LoadError(a_, Without("layers.1.ffn.experts.2.w3.scale")),
              HasSubstr("missing tensor 'layers.1.ffn.experts.2.w3.scale'"));
}

TEST_F(MutationTest, ExtraTensors) {
  std::vector<StWriteTensor> v = base_;
  StWriteTensor extra;
  extra.name = "layers.0.attn.bogus";
  extra.dtype = StDtype::kF32;
  extra.shape = {1};
  extra.data.resize(4);
  v.push_back(extra);
  EXPECT_THAT(LoadError(a_, v), HasSubstr("unexpected tensor 'layers.0.attn.bogus'"));
  v.back().name = "layers.3.attn_norm.weight";  // a layer the config does not have
  EXPECT_THAT(LoadError(a_, v), HasSubstr("unexpected tensor 'layers.3.attn_norm.weight'"));
  v.back().name = "layers.0.attn_norm.scale";  // a scale for something that is not a linear
  EXPECT_THAT(LoadError(a_, v),
              HasSubstr("unexpected tensor 'layers.0.attn_norm.scale' (its weight is not "
                        "quantized)"));
  v.back().name = "layers.0.attn.compressor.wkv.weight";  // layer 0 has ratio 0
  EXPECT_THAT(LoadError(a_, v), HasSubstr("unexpected tensor 'layers.0.attn.compressor.wkv"));
}

TEST_F(MutationTest, MtpAliasesAreIgnored) {
  std::vector<StWriteTensor> v = base_;
  for (const char* alias :
       {"mtp.0.emb.tok_emb.weight", "mtp.0.head.weight", "mtp.0.embed.weight"}) {
    StWriteTensor t;
    t.name = alias;
    t.dtype = StDtype::kBF16;
    t.shape = {1024, 128};
    t.data.resize(1024 * 128 * 2);
    v.push_back(t);
  }
  EXPECT_EQ(LoadError(a_, v), "");
}

TEST_F(MutationTest, WrongShapes) {
  EXPECT_THAT(LoadError(a_, Edited("layers.0.attn.attn_sink",
                                   [](StWriteTensor& t) {
                                     t.shape = {5};
                                     t.data.resize(20);
                                   })),
              HasSubstr("tensor 'layers.0.attn.attn_sink': shape [5] != expected [4]"));
  EXPECT_THAT(LoadError(a_, Edited("layers.1.attn.wkv.weight",
                                   [](StWriteTensor& t) {
                                     t.shape = {64, 256};
                                   })),
              HasSubstr("tensor 'layers.1.attn.wkv.weight': shape [64,256] != expected "
                        "[128,128] (dtype F8_E4M3)"));
  // Same byte count, transposed shape.
  EXPECT_THAT(LoadError(a_, Edited("layers.1.attn.wo_a.weight",
                                   [](StWriteTensor& t) {
                                     t.shape = {256, 128};
                                   })),
              HasSubstr("tensor 'layers.1.attn.wo_a.weight': shape [256,128] != expected "
                        "[128,256]"));
  EXPECT_THAT(LoadError(a_, Edited("layers.0.attn.wq_b.scale",
                                   [](StWriteTensor& t) {
                                     t.shape = {4};
                                     t.data.resize(4);
                                   })),
              HasSubstr("tensor 'layers.0.attn.wq_b.scale': shape [4] != expected [4,1]"));
  EXPECT_THAT(LoadError(a_, Edited("mtp.0.h_proj.weight",
                                   [](StWriteTensor& t) {
                                     t.shape = {64, 128};
                                     t.data.resize(64 * 128);
                                   })),
              HasSubstr("tensor 'mtp.0.h_proj.weight': shape [64,128] != expected [128,128]"));
  EXPECT_THAT(LoadError(a_, Edited("layers.0.ffn.gate.tid2eid",
                                   [](StWriteTensor& t) {
                                     t.shape = {1024, 1};
                                     t.data.resize(1024 * 8);
                                   })),
              HasSubstr("tensor 'layers.0.ffn.gate.tid2eid': shape [1024,1]"));
}

TEST_F(MutationTest, WrongDtypes) {
  EXPECT_THAT(LoadError(a_, Edited("layers.0.attn_norm.weight",
                                   [](StWriteTensor& t) { t.dtype = StDtype::kI16; })),
              HasSubstr("tensor 'layers.0.attn_norm.weight': dtype I16 != expected BF16"));
  EXPECT_THAT(LoadError(a_, Edited("layers.0.attn.wq_a.weight",
                                   [](StWriteTensor& t) { t.dtype = StDtype::kF8E5M2; })),
              HasSubstr("tensor 'layers.0.attn.wq_a.weight': dtype F8_E5M2 is not a linear"));
  EXPECT_THAT(LoadError(a_, Edited("layers.0.attn.wq_a.scale",
                                   [](StWriteTensor& t) { t.dtype = StDtype::kU8; })),
              HasSubstr("tensor 'layers.0.attn.wq_a.scale': dtype U8 != expected F8_E8M0"));
  EXPECT_THAT(LoadError(a_, Edited("layers.0.ffn.gate.tid2eid",
                                   [](StWriteTensor& t) { t.dtype = StDtype::kF64; })),
              HasSubstr("tensor 'layers.0.ffn.gate.tid2eid': dtype F64 != expected I64"));
}

TEST_F(MutationTest, NanScalesAndWeights) {
  EXPECT_THAT(LoadError(a_, Edited("layers.2.attn.wo_b.scale",
                                   [](StWriteTensor& t) { t.data.back() = 0xFF; })),
              HasSubstr("tensor 'layers.2.attn.wo_b.scale': scale byte 0xFF (NaN)"));
  EXPECT_THAT(LoadError(a_, Edited("layers.2.ffn.experts.1.w2.scale",
                                   [](StWriteTensor& t) { t.data[5] = 0xFF; })),
              HasSubstr("scale byte 0xFF (NaN) at element 5"));
  EXPECT_THAT(LoadError(a_, Edited("layers.2.attn.wq_a.weight",
                                   [](StWriteTensor& t) { t.data[3] = 0x7F; })),
              HasSubstr("tensor 'layers.2.attn.wq_a.weight': e4m3 NaN byte at element 3"));
}

TEST_F(MutationTest, BadTid2eid) {
  auto set_id = [](int64_t index, int64_t value) {
    return [=](StWriteTensor& t) { std::memcpy(t.data.data() + 8 * index, &value, 8); };
  };
  EXPECT_THAT(LoadError(a_, Edited("layers.0.ffn.gate.tid2eid", set_id(7, 4))),
              HasSubstr("expert id 4 at token 3 is outside [0, 4)"));
  EXPECT_THAT(LoadError(a_, Edited("layers.0.ffn.gate.tid2eid", set_id(0, -1))),
              HasSubstr("expert id -1 at token 0"));
  // Make row 10 repeat its first expert.
  std::vector<StWriteTensor> v = Edited("layers.0.ffn.gate.tid2eid", [](StWriteTensor& t) {
    std::memcpy(t.data.data() + 8 * 21, t.data.data() + 8 * 20, 8);
  });
  EXPECT_THAT(LoadError(a_, v), HasSubstr("token 10 lists expert"));
  // I32 ids are accepted.
  v = Edited("layers.0.ffn.gate.tid2eid", [](StWriteTensor& t) {
    std::vector<uint8_t> d(t.data.size() / 2);
    for (size_t i = 0; i < d.size() / 4; ++i)
      std::memcpy(d.data() + 4 * i, t.data.data() + 8 * i, 4);
    t.data = d;
    t.dtype = StDtype::kI32;
  });
  EXPECT_EQ(LoadError(a_, v), "");
}

TEST_F(MutationTest, Fp4AsU8AndF4LoadTheSameValues) {
  const std::string name = "layers.1.ffn.experts.0.w1.weight";
  TempDir dir("fp4variants");
  auto load = [&](const std::vector<StWriteTensor>& v) {
    EXPECT_TRUE(WriteSafetensorsFile(dir / "model.safetensors", v).ok());
    Result<SafetensorsArchive> ar = SafetensorsArchive::Open(dir.path());
    EXPECT_TRUE(ar.ok());
    Result<ModelWeights> w = LoadModelWeights(*ar, a_);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return w.ok() ? w->layers[1].ffn.experts[0].w1.data : std::vector<float>();
  };
  const std::vector<float> i8 = load(base_);
  ASSERT_FALSE(i8.empty());
  const std::vector<float> u8 =
      load(Edited(name, [](StWriteTensor& t) { t.dtype = StDtype::kU8; }));
  EXPECT_TRUE(SameFloats(i8, u8));
  const std::vector<float> f4 = load(Edited(name, [](StWriteTensor& t) {
    t.dtype = StDtype::kF4;
    t.shape[1] *= 2;
  }));
  EXPECT_TRUE(SameFloats(i8, f4));
  EXPECT_THAT(LoadError(a_, Edited(name,
                                   [](StWriteTensor& t) {
                                     t.dtype = StDtype::kF4;
                                     t.data.resize(t.data.size() / 2);
                                   })),
              HasSubstr("tensor '" + name + "': shape [128,64] != expected [128,128]"));
}

TEST_F(MutationTest, FormatIsChosenPerTensor) {
  // A BF16 weight among FP8 ones loads (its scale must then be gone) ...
  std::vector<StWriteTensor> v = Without("layers.0.attn.wkv.scale");
  for (StWriteTensor& t : v) {
    if (t.name != "layers.0.attn.wkv.weight") continue;
    std::vector<float> vals = *RandomTensorValues(a_, kSeed, t.name);
    t.dtype = StDtype::kBF16;
    t.data.resize(vals.size() * 2);
    for (size_t i = 0; i < vals.size(); ++i) {
      uint16_t b = quant::FloatToBf16Bits(vals[i]);
      std::memcpy(t.data.data() + 2 * i, &b, 2);
    }
  }
  EXPECT_EQ(LoadError(a_, v), "");
  // ... but a leftover scale next to a BF16 weight is an error.
  std::vector<StWriteTensor> with_scale = v;
  for (const StWriteTensor& t : base_) {
    if (t.name == "layers.0.attn.wkv.scale") with_scale.push_back(t);
  }
  EXPECT_THAT(LoadError(a_, with_scale),
              HasSubstr("tensor 'layers.0.attn.wkv.scale': unexpected scale: "
                        "'layers.0.attn.wkv.weight' is BF16"));
}

class Bf16MutationTest : public MutationTest {
 protected:
  CheckpointLayout layout() const override { return CheckpointLayout::kBf16; }
};

TEST_F(Bf16MutationTest, UnchangedLoadsAndScalesAreUnexpected) {
  EXPECT_EQ(LoadError(a_, base_), "");
  std::vector<StWriteTensor> v = base_;
  StWriteTensor s;
  s.name = "layers.0.attn.wq_a.scale";
  s.dtype = StDtype::kF8E8M0;
  s.shape = {1, 1};
  s.data = {127};
  v.push_back(s);
  EXPECT_THAT(LoadError(a_, v), HasSubstr("'layers.0.attn.wq_a.scale': unexpected scale"));
}

// Issue 19: non-finite float weights are refused at load, naming the tensor and element.
TEST_F(Bf16MutationTest, NonFiniteWeightsAreRefused) {
  // BF16 NaN 0x7FC0 and +inf 0x7F80, little-endian, at element 1.
  EXPECT_THAT(LoadError(a_, Edited("layers.0.attn.wq_a.weight",
                                   [](StWriteTensor& t) {
                                     t.data[2] = 0xC0;
                                     t.data[3] = 0x7F;
                                   })),
              HasSubstr("tensor 'layers.0.attn.wq_a.weight': NaN value at element 1"));
  EXPECT_THAT(LoadError(a_, Edited("layers.0.attn_norm.weight",
                                   [](StWriteTensor& t) {
                                     t.data[0] = 0x80;
                                     t.data[1] = 0x7F;
                                   })),
              HasSubstr("tensor 'layers.0.attn_norm.weight': infinite value at element 0"));
}

TEST_F(LoaderTest, ConfigMismatchIsReported) {
  TempDir dir("mismatch");
  ASSERT_TRUE(WriteRandomCheckpoint(a_, kSeed, CheckpointLayout::kBf16, dir.path()).ok());
  Result<SafetensorsArchive> ar = SafetensorsArchive::Open(dir.path());
  ASSERT_TRUE(ar.ok());
  ModelConfig other = TinyConfig("tiny-b.json");
  Result<ModelWeights> w = LoadModelWeights(*ar, other);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), HasSubstr("model.safetensors"));
  ModelConfig invalid = a_;
  invalid.o_groups = 3;
  EXPECT_FALSE(LoadModelWeights(*ar, invalid).ok());
}

TEST_F(LoaderTest, Fp8LayoutNeedsFp4FriendlyDims) {
  ModelConfig c = a_;
  c.moe_inter_dim = 48;
  EXPECT_THAT(RandomCheckpointTensors(c, 1, CheckpointLayout::kFp8Fp4).status().message(),
              HasSubstr("divisible by 32"));
  EXPECT_TRUE(RandomCheckpointTensors(c, 1, CheckpointLayout::kBf16).ok());
}

TEST_F(LoaderTest, LoadLinearWeightAndHalf) {
  EXPECT_EQ(HalfBitsToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfBitsToFloat(0xC000), -2.0f);
  EXPECT_EQ(HalfBitsToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfBitsToFloat(0x7BFF), 65504.0f);
  EXPECT_TRUE(std::isinf(HalfBitsToFloat(0x7C00)));
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(0x7E00)));
  TempDir dir("f16");
  StWriteTensor t;
  t.name = "w.weight";
  t.dtype = StDtype::kF16;
  t.shape = {1, 2};
  t.data = {0x00, 0x3C, 0x00, 0xC0};
  ASSERT_TRUE(WriteSafetensorsFile(dir / "x.safetensors", {t}).ok());
  Result<SafetensorsArchive> ar = SafetensorsArchive::Open(dir / "x.safetensors");
  ASSERT_TRUE(ar.ok());
  Result<Tensor> w = LoadLinearWeight(*ar, "w.weight", 1, 2);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->data, (std::vector<float>{1.0f, -2.0f}));
  EXPECT_THAT(LoadLinearWeight(*ar, "w.weight", 2, 1).status().message(),
              HasSubstr("shape [1,2] != expected [2,1]"));
}

TEST_F(LoaderTest, RequantizeWeights) {
  TempDir bf("rq_bf16"), f8("rq_fp8");
  ASSERT_TRUE(WriteRandomCheckpoint(a_, kSeed, CheckpointLayout::kBf16, bf.path()).ok());
  ASSERT_TRUE(WriteRandomCheckpoint(a_, kSeed, CheckpointLayout::kFp8Fp4, f8.path()).ok());
  Result<SafetensorsArchive> abf = SafetensorsArchive::Open(bf.path());
  Result<SafetensorsArchive> af8 = SafetensorsArchive::Open(f8.path());
  ASSERT_TRUE(abf.ok() && af8.ok());
  Result<ModelWeights> wbf = LoadModelWeights(*abf, a_);
  Result<ModelWeights> wf8 = LoadModelWeights(*af8, a_);
  ASSERT_TRUE(wbf.ok() && wf8.ok());

  // fp32: an exact copy.
  const ModelWeights same = RequantizeWeights(*wf8, NumFormat::kFp32);
  EXPECT_TRUE(SameFloats(same.layers[1].attn.wq_a.data, wf8->layers[1].attn.wq_a.data));

  // bf16 on fp8-loaded weights: every linear becomes bf16-representable; the rest is untouched.
  const ModelWeights b = RequantizeWeights(*wf8, NumFormat::kBf16);
  for (const Tensor* t : {&b.embed, &b.layers[1].attn.wq_b, &b.layers[1].ffn.experts[2].w2,
                          &b.layers[1].attn.indexer->weights_proj}) {
    for (float x : t->data) ASSERT_EQ(quant::RoundBf16(x), x);
  }
  EXPECT_TRUE(SameFloats(b.layers[0].hc_attn.fn.data, wf8->layers[0].hc_attn.fn.data));
  EXPECT_TRUE(
      SameFloats(b.layers[1].attn.compressor->ape.data, wf8->layers[1].attn.compressor->ape.data));

  // fp8 on bf16-loaded weights: FP8-shipped linears get e4m3 128x128 blocks, BF16-shipped
  // matrices stay bf16, norms/hc/ape/sink/bias are untouched.
  const ModelWeights q = RequantizeWeights(*wbf, NumFormat::kFp8);
  auto fp8_of = [](const Tensor& t) {
    const int64_t r = t.dim(0), c = t.dim(1);
    std::vector<uint8_t> bytes(static_cast<size_t>(r * c));
    std::vector<uint8_t> scales(static_cast<size_t>(((r + 127) / 128) * ((c + 127) / 128)));
    quant::QuantizeFp8Weight(t.ptr(), r, c, bytes.data(), scales.data());
    std::vector<float> y(static_cast<size_t>(r * c));
    quant::DequantFp8Weight(bytes.data(), scales.data(), r, c, y.data());
    return y;
  };
  EXPECT_TRUE(SameFloats(q.layers[1].attn.wq_a.data, fp8_of(wbf->layers[1].attn.wq_a)));
  EXPECT_TRUE(
      SameFloats(q.layers[2].ffn.experts[3].w3.data, fp8_of(wbf->layers[2].ffn.experts[3].w3)));
  EXPECT_TRUE(
      SameFloats(q.layers[1].attn.indexer->wq_b.data, fp8_of(wbf->layers[1].attn.indexer->wq_b)));
  EXPECT_FALSE(SameFloats(q.layers[1].attn.wq_a.data, wbf->layers[1].attn.wq_a.data));
  EXPECT_TRUE(SameFloats(q.embed.data, wbf->embed.data));  // already bf16
  EXPECT_TRUE(
      SameFloats(q.layers[1].attn.compressor->wkv.data, wbf->layers[1].attn.compressor->wkv.data));
  EXPECT_TRUE(SameFloats(q.layers[1].attn_norm.data, wbf->layers[1].attn_norm.data));
  EXPECT_TRUE(SameFloats(q.layers[1].ffn.gate_bias.data, wbf->layers[1].ffn.gate_bias.data));
  EXPECT_EQ(q.layers[0].ffn.tid2eid, wbf->layers[0].ffn.tid2eid);

  // fp8 of weights that are already fp8 with the same blocks changes nothing.
  const ModelWeights again = RequantizeWeights(*wf8, NumFormat::kFp8);
  EXPECT_TRUE(SameFloats(again.layers[2].attn.wo_b.data, wf8->layers[2].attn.wo_b.data));
  EXPECT_TRUE(SameFloats(again.layers[0].ffn.shared.w2.data, wf8->layers[0].ffn.shared.w2.data));
}

}  // namespace
}  // namespace nw
