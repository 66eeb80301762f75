#include "engine/checkpoint/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint_test_util.h"
#include "engine/checkpoint/json_util.h"

namespace nw {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using testing_util::ConfigPath;
using testing_util::TempDir;

json ReadJson(const std::string& config_name) {
  return json::parse(testing_util::ReadAll(ConfigPath(config_name)));
}

// Parses `j` and returns the error message (empty when it parsed).
std::string ParseError(const json& j, const std::string& source = "cfg.json") {
  Result<ModelConfig> r = ParseModelConfig(j, source);
  return r.ok() ? std::string() : r.status().message();
}

TEST(ConfigTest, ParsesTinyAHfKeys) {
  Result<ModelConfig> r = LoadModelConfig(ConfigPath("tiny-a.json"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ModelConfig& c = *r;
  EXPECT_EQ(c.vocab_size, 1024);
  EXPECT_EQ(c.dim, 128);
  EXPECT_EQ(c.n_layers, 3);
  EXPECT_EQ(c.n_mtp_layers, 1);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rope_head_dim, 64);
  EXPECT_EQ(c.q_lora_rank, 128);
  EXPECT_EQ(c.o_groups, 2);
  EXPECT_EQ(c.o_lora_rank, 64);
  EXPECT_EQ(c.window_size, 128);
  EXPECT_EQ(c.compress_ratios, (std::vector<int>{0, 4, 128, 0}));
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.compress_rope_theta, 160000.0);
  EXPECT_EQ(c.original_seq_len, 65536);
  EXPECT_EQ(c.rope_factor, 16.0);
  EXPECT_EQ(c.beta_fast, 32.0);
  EXPECT_EQ(c.beta_slow, 1.0);
  EXPECT_EQ(c.index_n_heads, 4);
  EXPECT_EQ(c.index_head_dim, 64);
  EXPECT_EQ(c.index_topk, 16);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_EQ(c.hc_eps, 1e-6);
  EXPECT_EQ(c.n_routed_experts, 4);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.n_activated_experts, 2);
  EXPECT_EQ(c.moe_inter_dim, 128);
  EXPECT_EQ(c.score_func, ScoreFunc::kSqrtSoftplus);
  EXPECT_EQ(c.route_scale, 1.5);
  EXPECT_EQ(c.n_hash_layers, 1);
  EXPECT_EQ(c.swiglu_limit, 10.0);
  EXPECT_FALSE(c.swiglu_clamp_shared_expert);  // tiny-a.json asks for the first release's
  EXPECT_EQ(c.norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 65536);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_id, 1);
  EXPECT_EQ(c.num_indexer_layers(), 1);
  EXPECT_TRUE(c.has_indexer(1));
  EXPECT_FALSE(c.has_indexer(2));
  EXPECT_TRUE(c.is_hash_layer(0));
  EXPECT_FALSE(c.is_hash_layer(1));
}

TEST(ConfigTest, ParsesTinyB) {
  Result<ModelConfig> r = LoadModelConfig(ConfigPath("tiny-b.json"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->vocab_size, 4096);
  EXPECT_EQ(r->dim, 256);
  EXPECT_EQ(r->compress_ratios, (std::vector<int>{0, 4, 128, 4, 0}));
  EXPECT_EQ(r->n_routed_experts, 16);
  EXPECT_EQ(r->o_groups, 4);
  EXPECT_EQ(r->num_indexer_layers(), 2);
}

TEST(ConfigTest, ModelArgsKeysGiveTheSameConfig) {
  Result<ModelConfig> hf = LoadModelConfig(ConfigPath("tiny-a.json"));
  Result<ModelConfig> ma = LoadModelConfig(ConfigPath("tiny-a.modelargs.json"));
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  ASSERT_TRUE(ma.ok()) << ma.status().ToString();
  ModelConfig expected = *hf;
  expected.bos_token_id = -1;  // ModelArgs has no token ids
  expected.eos_token_id = -1;
  EXPECT_EQ(*ma, expected);
}

TEST(ConfigTest, EveryShippedConfigParses) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(ConfigPath(""))) {
    if (e.path().extension() != ".json") continue;
    Result<ModelConfig> r = LoadModelConfig(e.path());
    EXPECT_TRUE(r.ok()) << e.path() << ": " << r.status().ToString();
    ++n;
  }
  EXPECT_GE(n, 3);
}

TEST(ConfigTest, HfJsonRoundTrips) {
  for (const char* name : {"tiny-a.json", "tiny-b.json"}) {
    Result<ModelConfig> c = LoadModelConfig(ConfigPath(name));
    ASSERT_TRUE(c.ok());
    Result<ModelConfig> back = ParseModelConfig(c->ToHfJson(), "round-trip");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, *c) << name;
    // And through text (doubles must survive dump/parse).
    Result<ModelConfig> text = ParseModelConfig(json::parse(c->ToHfJson().dump()), "text");
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(*text, *c);
  }
}

TEST(ConfigTest, YarnOffWithoutRopeScaling) {
  json j = ReadJson("tiny-a.json");
  j.erase("rope_scaling");
  Result<ModelConfig> r = ParseModelConfig(j, "cfg.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->original_seq_len, 0);
  EXPECT_EQ(r->rope_factor, 1.0);
  Result<ModelConfig> back = ParseModelConfig(r->ToHfJson(), "rt");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *r);
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(ParseError(j), "");
}

TEST(ConfigTest, DocumentedDefaults) {
  json j = ReadJson("tiny-a.json");
  j.erase("num_nextn_predict_layers");
  j.erase("hc_eps");
  j.erase("rms_norm_eps");
  j.erase("bos_token_id");
  j.erase("eos_token_id");
  Result<ModelConfig> r = ParseModelConfig(j, "cfg.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->n_mtp_layers, 1);
  EXPECT_EQ(r->hc_eps, 1e-6);
  EXPECT_EQ(r->norm_eps, 1e-6);
  EXPECT_EQ(r->bos_token_id, -1);
  EXPECT_EQ(r->eos_token_id, -1);
}

// swiglu_clamp_shared_expert: optional, default true (DeepSeek's current definition), read in
// both key styles, written back by ToHfJson, and a JSON bool or an error naming file and key.
TEST(ConfigTest, SwigluClampSharedExpertKey) {
  json j = ReadJson("tiny-a.json");
  ASSERT_EQ(j.at("swiglu_clamp_shared_expert"), json(false));
  j.erase("swiglu_clamp_shared_expert");
  Result<ModelConfig> r = ParseModelConfig(j, "cfg.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->swiglu_clamp_shared_expert);
  EXPECT_EQ(r->ToHfJson().at("swiglu_clamp_shared_expert"), json(true));

  for (bool v : {false, true}) {
    j["swiglu_clamp_shared_expert"] = v;
    r = ParseModelConfig(j, "cfg.json");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->swiglu_clamp_shared_expert, v);
    const json written = r->ToHfJson();
    EXPECT_EQ(written.at("swiglu_clamp_shared_expert"), json(v));
    Result<ModelConfig> back = ParseModelConfig(json::parse(written.dump()), "rt");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, *r);
  }
  for (const json& bad : {json(1), json(0), json("true"), json(nullptr), json::array({true})}) {
    j["swiglu_clamp_shared_expert"] = bad;
    EXPECT_THAT(ParseError(j, "m/config.json"),
                HasSubstr("m/config.json: key 'swiglu_clamp_shared_expert' must be true or false"))
        << bad.dump();
  }

  json ma = ReadJson("tiny-a.modelargs.json");
  ma["swiglu_clamp_shared_expert"] = true;
  r = ParseModelConfig(ma, "inference/config.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->swiglu_clamp_shared_expert);
  ma["swiglu_clamp_shared_expert"] = "no";
  EXPECT_THAT(ParseError(ma, "inference/config.json"),
              HasSubstr("inference/config.json: key 'swiglu_clamp_shared_expert'"));
}

// Every config whose golden outputs or trained weights come from the unclamped shared expert
// says so explicitly (a missing key would mean the clamp).
TEST(ConfigTest, ShippedConfigsKeepTheUnclampedSharedExpert) {
  const std::filesystem::path root(NW_SOURCE_DIR);
  for (const std::filesystem::path& p :
       {root / "models/configs/tiny-a.json", root / "models/configs/tiny-a.modelargs.json",
        root / "models/configs/tiny-b.json", root / "models/train/tiny-v4.json",
        root / "tests/data/golden/random-seed0.config.json",
        root / "tests/cpu_backend/data/deepseek_ref/config.json"}) {
    Result<ModelConfig> r = LoadModelConfig(p);
    ASSERT_TRUE(r.ok()) << p << ": " << r.status().ToString();
    EXPECT_FALSE(r->swiglu_clamp_shared_expert) << p;
  }
}

// The shipped trained models follow DeepSeek's current definition (the shared expert clamped):
// tiny-v4 was fine-tuned with the clamp on (models/tiny-v4/README.md, run 3).
TEST(ConfigTest, ShippedTrainedModelsClampTheSharedExpert) {
  const std::filesystem::path root(NW_SOURCE_DIR);
  for (const std::filesystem::path& p :
       {root / "models/tiny-v4/config.json", root / "models/train/tiny-v4-indexer.json"}) {
    Result<ModelConfig> r = LoadModelConfig(p);
    ASSERT_TRUE(r.ok()) << p << ": " << r.status().ToString();
    EXPECT_TRUE(r->swiglu_clamp_shared_expert) << p;
  }
}

TEST(ConfigTest, EosListTakesTheFirst) {
  json j = ReadJson("tiny-a.json");
  j["eos_token_id"] = json::array({1, 2});
  Result<ModelConfig> r = ParseModelConfig(j, "cfg.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->eos_token_id, 1);
}

TEST(ConfigTest, MissingKeysNameFileAndKey) {
  for (const char* key : {"hidden_size", "num_attention_heads", "compress_ratios", "scoring_func",
                          "moe_intermediate_size", "swiglu_limit", "max_position_embeddings",
                          "compress_rope_theta", "num_hash_layers"}) {
    json j = ReadJson("tiny-a.json");
    j.erase(key);
    EXPECT_EQ(ParseError(j, "dir/config.json"),
              std::string("dir/config.json: missing required key '") + key + "'");
  }
  json ma = ReadJson("tiny-a.modelargs.json");
  for (const char* key : {"dim", "n_heads", "moe_inter_dim", "max_seq_len", "original_seq_len"}) {
    json j = ma;
    j.erase(key);
    EXPECT_EQ(ParseError(j, "inference/config.json"),
              std::string("inference/config.json: missing required key '") + key + "'");
  }
  json j = ReadJson("tiny-a.json");
  j["rope_scaling"].erase("factor");
  EXPECT_EQ(ParseError(j), "cfg.json: missing required key 'rope_scaling.factor'");
}

TEST(ConfigTest, UnknownKeysAreErrors) {
  json j = ReadJson("tiny-a.json");
  j["n_routed_experts_score"] = 4;
  EXPECT_EQ(ParseError(j, "m/config.json"), "m/config.json: unknown key 'n_routed_experts_score'");
  j = ReadJson("tiny-a.json");
  j["rope_scaling"]["mscale"] = 1.0;
  EXPECT_EQ(ParseError(j), "cfg.json: unknown key 'rope_scaling.mscale'");
  j = ReadJson("tiny-a.modelargs.json");
  j["engram_layer_ids"] = json::array({1});
  EXPECT_EQ(ParseError(j), "cfg.json: unknown key 'engram_layer_ids'");
}

TEST(ConfigTest, KnownIgnoredKeysAreAccepted) {
  json j = ReadJson("tiny-a.json");
  j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}};
  j["expert_dtype"] = "fp4";
  j["transformers_version"] = "4.57.1";
  j["use_cache"] = true;
  j["initializer_range"] = 0.02;
  j["norm_topk_prob"] = true;
  j["topk_method"] = "noaux_tc";
  j["attention_dropout"] = 0.0;
  j["max_seq_len"] = 4096;
  EXPECT_EQ(ParseError(j), "");
  json ma = ReadJson("tiny-a.modelargs.json");
  ma["scale_fmt"] = "ue8m0";
  ma["scale_dtype"] = "fp8";
  ma["expert_dtype"] = "fp4";
  EXPECT_EQ(ParseError(ma), "");
}

TEST(ConfigTest, IgnoredKeysThatContradictTheArchitecture) {
  json j = ReadJson("tiny-a.json");
  j["num_key_value_heads"] = 4;
  EXPECT_THAT(ParseError(j), HasSubstr("'num_key_value_heads' must be 1"));
  j = ReadJson("tiny-a.json");
  j["model_type"] = "deepseek_v3";
  EXPECT_THAT(ParseError(j), HasSubstr("'model_type' must be \"deepseek_v4\""));
  j = ReadJson("tiny-a.json");
  j["tie_word_embeddings"] = true;
  EXPECT_THAT(ParseError(j), HasSubstr("'tie_word_embeddings' must be false"));
}

TEST(ConfigTest, ConflictingAliases) {
  json j = ReadJson("tiny-a.json");
  j["dim"] = 256;
  EXPECT_EQ(ParseError(j), "cfg.json: keys 'hidden_size' and 'dim' disagree (128 vs 256)");
  j["dim"] = 128;  // agreeing duplicates are fine
  EXPECT_EQ(ParseError(j), "");
  j = ReadJson("tiny-a.json");
  j["original_seq_len"] = 4096;
  j["rope_factor"] = 16.0;
  j["beta_fast"] = 32;
  j["beta_slow"] = 1;
  EXPECT_THAT(ParseError(j), HasSubstr("disagree"));
}

TEST(ConfigTest, BadTypes) {
  json j = ReadJson("tiny-a.json");
  j["hidden_size"] = 128.5;
  EXPECT_EQ(ParseError(j), "cfg.json: key 'hidden_size' must be an integer, got 128.5");
  j = ReadJson("tiny-a.json");
  j["hidden_size"] = "128";
  EXPECT_THAT(ParseError(j), HasSubstr("'hidden_size' must be an integer"));
  j = ReadJson("tiny-a.json");
  j["rope_theta"] = "1e4";
  EXPECT_THAT(ParseError(j), HasSubstr("'rope_theta' must be a number"));
  j = ReadJson("tiny-a.json");
  j["scoring_func"] = "relu";
  EXPECT_THAT(ParseError(j), HasSubstr("'scoring_func' must be"));
  j = ReadJson("tiny-a.json");
  j["vocab_size"] = 1ll << 40;
  EXPECT_THAT(ParseError(j), HasSubstr("'vocab_size' is out of range"));
  j = ReadJson("tiny-a.json");
  j["rope_scaling"]["type"] = "linear";
  EXPECT_THAT(ParseError(j), HasSubstr("'rope_scaling.type' must be \"yarn\""));
  EXPECT_THAT(ParseError(json::array()), HasSubstr("must be a JSON object"));
}

TEST(ConfigTest, BadCompressRatios) {
  json j = ReadJson("tiny-a.json");
  j["compress_ratios"] = json::array({0, 4, 64, 0});
  EXPECT_EQ(ParseError(j),
            "cfg.json: invalid model config: compress_ratios[2] = 64 (must be 0, 4 or 128)");
  j["compress_ratios"] = json::array({0, 4, 128});
  EXPECT_THAT(ParseError(j),
              HasSubstr("compress_ratios has 3 entries, expected n_layers + n_mtp_layers = 4"));
  j["compress_ratios"] = json::array({0, 4, 128, 0, 0});
  EXPECT_THAT(ParseError(j), HasSubstr("compress_ratios has 5 entries"));
  j["compress_ratios"] = "0,4,128,0";
  EXPECT_THAT(ParseError(j), HasSubstr("'compress_ratios' must be a list"));
}

TEST(ConfigTest, InconsistentFields) {
  struct Case {
    const char* key;
    json value;
    const char* message;
  };
  const Case cases[] = {
      {"num_attention_heads", 5, "n_heads (5) must be divisible by o_groups (2)"},
      {"head_dim", 160, "head_dim - rope_head_dim (96) must be a multiple of 64"},
      {"index_head_dim", 96, "index_head_dim (96) must be a power of two and a multiple of 32"},
      {"index_head_dim", 16, "index_head_dim (16) must be a power of two and a multiple of 32"},
      {"n_shared_experts", 2, "n_shared_experts must be 1, got 2"},
      {"num_experts_per_tok", 5, "n_activated_experts (5) exceeds n_routed_experts (4)"},
      {"num_hash_layers", 3, "n_hash_layers (3) must be in [0, n_layers=3)"},
      {"hidden_size", 0, "dim must be positive, got 0"},
      {"moe_intermediate_size", -128, "moe_inter_dim must be positive, got -128"},
      {"qk_rope_head_dim", 63, "rope_head_dim must be even"},
      {"eos_token_id", 1024, "eos_token_id (1024) outside the vocabulary"},
      {"rms_norm_eps", 0.0, "norm_eps > 0"},
  };
  for (const Case& c : cases) {
    json j = ReadJson("tiny-a.json");
    j[c.key] = c.value;
    EXPECT_THAT(ParseError(j), HasSubstr(c.message)) << c.key << " = " << c.value;
    EXPECT_THAT(ParseError(j), HasSubstr("cfg.json: invalid model config: ")) << c.key;
  }
}

TEST(ConfigTest, ValidateCatchesHandBuiltConfigs) {
  Result<ModelConfig> c = LoadModelConfig(ConfigPath("tiny-a.json"));
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->Validate().ok());
  ModelConfig bad = *c;
  bad.compress_ratios[0] = 2;
  EXPECT_FALSE(bad.Validate().ok());
  bad = *c;
  bad.n_mtp_layers = 0;  // ratios length no longer matches
  EXPECT_FALSE(bad.Validate().ok());
}

TEST(ConfigTest, LoadFromFolderAndErrors) {
  TempDir dir("config");
  testing_util::WriteAll(dir / "config.json", testing_util::ReadAll(ConfigPath("tiny-a.json")));
  Result<ModelConfig> r = LoadModelConfig(dir.path());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->dim, 128);

  Result<ModelConfig> missing = LoadModelConfig(dir / "nope.json");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nope.json"));

  testing_util::WriteAll(dir / "dup.json", R"({"vocab_size": 1, "vocab_size": 2})");
  Result<ModelConfig> dup = LoadModelConfig(dir / "dup.json");
  EXPECT_THAT(dup.status().message(), HasSubstr("dup.json: duplicate key 'vocab_size'"));

  testing_util::WriteAll(dir / "broken.json", R"({"vocab_size": )");
  Result<ModelConfig> broken = LoadModelConfig(dir / "broken.json");
  EXPECT_THAT(broken.status().message(), HasSubstr("broken.json: invalid JSON"));
}

// Issue 19: sizes that multiply into allocations and per-token loops have upper bounds, with
// the reason in the message.
TEST(ConfigTest, UpperBoundsWithTheReason) {
  struct Case {
    const char* key;
    json value;
    const char* message;
  };
  const Case cases[] = {
      {"hc_sinkhorn_iters", 2000000000, "hc_sinkhorn_iters (2000000000) exceeds 1000"},
      {"sliding_window", 100000000, "window_size (100000000) exceeds 65536"},
      {"max_position_embeddings", 2000000000, "max_position_embeddings (2000000000) exceeds"},
      {"index_topk", 1 << 30, "index_topk (1073741824) exceeds 65536"},
      {"vocab_size", 1 << 30, "vocab_size (1073741824) exceeds"},
  };
  for (const Case& c : cases) {
    json j = ReadJson("tiny-a.json");
    j[c.key] = c.value;
    EXPECT_THAT(ParseError(j), HasSubstr(c.message)) << c.key << " = " << c.value;
    EXPECT_THAT(ParseError(j), HasSubstr("no DeepSeek-V4 model comes near it")) << c.key;
  }
  // The real V4-Flash config is well inside.
  EXPECT_EQ(ParseError(ReadJson("v4-flash.json")), "");
}

// Issue 19: the duplicate-key check stays linear. A safetensors header is one object of n
// entries, each an object; the parser callback used before rescanned the enclosing object after
// every entry (O(n^2): 40,000 entries took minutes, a million hours).
TEST(JsonUtilTest, AHeaderOfManyEntriesParsesQuickly) {
  std::string text = "{";
  for (int i = 0; i < 200'000; ++i) {
    if (i > 0) text += ",";
    text +=
        "\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}";
  }
  text += "}";
  const auto t0 = std::chrono::steady_clock::now();
  Result<json> j = ParseJsonStrict(text, "big");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->size(), 200'000u);
  EXPECT_LT(s, 30.0) << "quadratic?";  // ~1 s on a loaded 2-core box; hours before
  text.insert(text.size() - 1, ",\"t7\":{}");
  EXPECT_EQ(ParseJsonStrict(text, "big").status().message(), "big: duplicate key 't7'");
}

TEST(JsonUtilTest, DuplicateKeysAtAnyDepth) {
  EXPECT_TRUE(ParseJsonStrict(R"({"a": {"b": 1, "c": 2}, "d": [{"b": 1}, {"b": 2}]})", "x").ok());
  Result<json> nested = ParseJsonStrict(R"({"a": {"b": 1, "b": 2}})", "x");
  EXPECT_EQ(nested.status().message(), "x: duplicate key 'b'");
  Result<json> in_array = ParseJsonStrict(R"([{"k": 1, "k": 1}])", "y");
  EXPECT_EQ(in_array.status().message(), "y: duplicate key 'k'");
  Result<json> bad_utf8 = ParseJsonStrict("{\"a\": \"\xff\"}", "z");
  EXPECT_THAT(bad_utf8.status().message(), HasSubstr("z: invalid JSON"));
}

}  // namespace
}  // namespace nw
