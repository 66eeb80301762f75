// The Engine API on the CPU backends: generation, stop tokens, probes, weight formats, errors,
// and LoadEngine on a random checkpoint written to disk.
#include "engine/engine.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/checkpoint/loader.h"
#include "engine/checkpoint/random_checkpoint.h"
#include "engine/cpu/random_weights.h"
#include "engine/cpu/sequence.h"
#include "engine/generate.h"
#include "engine/text/tokenizer.h"
#include "tests/cpu_backend/test_model.h"

namespace nw {
namespace {

using cpu::testing::RandomTokens;
using cpu::testing::TinyA;

std::unique_ptr<Engine> MakeEngine(const ModelConfig& cfg, const ModelWeights& w,
                                   const std::string& backend) {
  EngineOptions o;
  o.backend = backend;
  auto e = CreateEngine(cfg, Tokenizer(), w, "digest", o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

class EngineTest : public ::testing::Test {
 protected:
  ModelConfig cfg_ = TinyA();
  ModelWeights w_ = cpu::RandomModelWeights(cfg_, 5);
};

TEST_F(EngineTest, AvailableBackends) {
  EXPECT_EQ(AvailableBackends(), (std::vector<std::string>{"cpu", "cpu-paged", "cpu-pd"}));
  auto e = MakeEngine(cfg_, w_, "cpu-paged");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->backend(), "cpu-paged");
  EXPECT_EQ(e->device(), "cpu");
  EXPECT_EQ(e->model_digest(), "digest");
  EXPECT_EQ(e->config().dim, 128);
  EngineOptions bad;
  bad.backend = "cuda";
  auto r = CreateEngine(cfg_, Tokenizer(), w_, "d", bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
}

TEST_F(EngineTest, TinyA512PromptGeneratesIdenticallyOnBothBackends) {
  GenerateRequest req;
  req.prompt = RandomTokens(512, cfg_.vocab_size, 1);
  req.max_new_tokens = 6;
  ProbeRequest probe;
  probe.needle_begin = 200;
  probe.needle_end = 210;
  probe.query_begin = 500;
  probe.keep_topk_sets = true;
  req.probe = probe;
  auto cpu = MakeEngine(cfg_, w_, "cpu");
  auto paged = MakeEngine(cfg_, w_, "cpu-paged");
  auto a = cpu->Generate(req);
  auto b = paged->Generate(req);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(a->tokens.size(), 6u);
  EXPECT_FALSE(a->stopped);
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_GT(a->prefill_ms, 0.0);
  ASSERT_EQ(a->probes.size(), 1u);
  ASSERT_EQ(b->probes.size(), 1u);
  const IndexerProbe& p = a->probes[0];
  EXPECT_EQ(p.layer, 1);
  EXPECT_EQ(p.topk, 16);
  // 12 prompt positions (500..511) and 5 decode steps (the 6th token is never fed back).
  ASSERT_EQ(p.positions.size(), 17u);
  EXPECT_EQ(p.positions.front(), 500);
  EXPECT_EQ(p.positions.back(), 516);
  EXPECT_EQ(p.topk_sets.size(), 17u * 16u);
  EXPECT_EQ(p.positions, b->probes[0].positions);
  EXPECT_EQ(p.needle_rank, b->probes[0].needle_rank);
  EXPECT_EQ(p.in_topk, b->probes[0].in_topk);
  EXPECT_EQ(p.num_visible, b->probes[0].num_visible);
  EXPECT_EQ(p.topk_sets, b->probes[0].topk_sets);
}

TEST_F(EngineTest, StopsOnStopTokenAndHonoursLimits) {
  auto e = MakeEngine(cfg_, w_, "cpu");
  GenerateRequest req;
  req.prompt = RandomTokens(40, cfg_.vocab_size, 2);
  req.max_new_tokens = 5;
  auto free_run = e->Generate(req);
  ASSERT_TRUE(free_run.ok());
  ASSERT_EQ(free_run->tokens.size(), 5u);
  req.stop_tokens = {free_run->tokens[2]};
  auto stopped = e->Generate(req);
  ASSERT_TRUE(stopped.ok());
  EXPECT_TRUE(stopped->stopped);
  // Ends at the first occurrence of the stop token, which it includes.
  size_t first = 0;
  while (free_run->tokens[first] != free_run->tokens[2]) ++first;
  EXPECT_EQ(stopped->tokens,
            std::vector<int32_t>(free_run->tokens.begin(), free_run->tokens.begin() + first + 1));
  req.stop_tokens.clear();
  req.max_new_tokens = 0;
  auto none = e->Generate(req);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->tokens.empty());
}

TEST_F(EngineTest, GreedyDecodeFollowsArgmaxOfFullPrefill) {
  // Each generated token is the argmax of a fresh prefill of prompt + tokens so far.
  auto e = MakeEngine(cfg_, w_, "cpu");
  GenerateRequest req;
  req.prompt = RandomTokens(150, cfg_.vocab_size, 3);
  req.max_new_tokens = 4;
  auto r = e->Generate(req);
  ASSERT_TRUE(r.ok());
  std::vector<int32_t> seq = req.prompt;
  for (int32_t tok : r->tokens) {
    cpu::SequenceOptions o;
    o.max_tokens = static_cast<int64_t>(seq.size());
    auto s = cpu::Sequence::Create(cfg_, w_, o);
    ASSERT_TRUE(s.ok());
    std::vector<float> logits;
    ASSERT_TRUE(s->Prefill(seq, &logits).ok());
    EXPECT_EQ(Argmax(logits.data(), cfg_.vocab_size), tok);
    seq.push_back(tok);
  }
}

TEST(ArgmaxTest, TiesGoToLowestIdAndNanLoses) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v = {1, 3, 3, 2};
  EXPECT_EQ(Argmax(v.data(), 4), 1);
  v = {nan, -5, nan, -5};
  EXPECT_EQ(Argmax(v.data(), 4), 1);
}

TEST_F(EngineTest, WeightFormatsUseRequantizedWeights) {
  auto e = MakeEngine(cfg_, w_, "cpu");
  GenerateRequest req;
  req.prompt = RandomTokens(64, cfg_.vocab_size, 4);
  req.max_new_tokens = 3;
  ProbeRequest probe;
  probe.needle_begin = 8;
  probe.needle_end = 12;
  probe.query_begin = 40;
  probe.keep_topk_sets = true;
  req.probe = probe;
  for (NumFormat f : {NumFormat::kBf16, NumFormat::kFp8}) {
    req.precision.weights = f;
    auto got = e->Generate(req);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    // The same request on a backend holding an explicitly requantized copy, asked for as is.
    auto direct =
        CreateBackend("cpu", cfg_, std::make_shared<const ModelWeights>(RequantizeWeights(w_, f)));
    ASSERT_TRUE(direct.ok());
    GenerateRequest as_is = req;
    as_is.precision.weights = NumFormat::kFp32;
    auto want = Generate(**direct, as_is);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(got->tokens, want->tokens);
    EXPECT_EQ(got->probes[0].topk_sets, want->probes[0].topk_sets);
    auto again = e->Generate(req);  // served from the cached copy
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->probes[0].needle_rank, got->probes[0].needle_rank);
  }
}

TEST_F(EngineTest, RejectsBadRequests) {
  auto e = MakeEngine(cfg_, w_, "cpu");
  GenerateRequest req;
  EXPECT_EQ(e->Generate(req).status().code(), StatusCode::kInvalidArgument);  // empty prompt
  req.prompt = {1, cfg_.vocab_size};
  EXPECT_EQ(e->Generate(req).status().code(), StatusCode::kInvalidArgument);
  req.prompt = {1, 2};
  req.max_new_tokens = -1;
  EXPECT_EQ(e->Generate(req).status().code(), StatusCode::kInvalidArgument);
  req.max_new_tokens = cfg_.max_position_embeddings;
  EXPECT_EQ(e->Generate(req).status().code(), StatusCode::kOutOfRange);
  req.max_new_tokens = 1;
  req.precision.kv = NumFormat::kMxfp4;
  EXPECT_EQ(e->Generate(req).status().code(), StatusCode::kInvalidArgument);
  req.precision.kv = NumFormat::kFp32;
  req.index_topk = -3;
  EXPECT_EQ(e->Generate(req).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(EngineTest, TinyA4kPromptOnBothBackends) {
  GenerateRequest req;
  req.prompt = RandomTokens(4096, cfg_.vocab_size, 6);
  req.max_new_tokens = 8;
  ProbeRequest probe;
  probe.needle_begin = 1000;
  probe.needle_end = 1016;
  probe.query_begin = 4080;
  req.probe = probe;
  std::vector<GenerateResult> results;
  for (const char* backend : {"cpu", "cpu-paged"}) {
    auto e = MakeEngine(cfg_, w_, backend);
    auto r = e->Generate(req);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::cout << "[ timing   ] " << backend << ": 4096-token prefill " << r->prefill_ms
              << " ms, 8 tokens decode " << r->decode_ms << " ms\n";
    results.push_back(*r);
  }
  EXPECT_EQ(results[0].tokens, results[1].tokens);
  EXPECT_EQ(results[0].probes[0].needle_rank, results[1].probes[0].needle_rank);
  EXPECT_EQ(results[0].probes[0].num_visible.back(), (4096 + 7) / 4);
}

class LoadEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("nw_load_engine_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A random tiny-A checkpoint plus a trained tokenizer; extra_token_id >= 0 adds a special
  // token with that id.
  void WriteModel(CheckpointLayout layout, int extra_token_id = -1) {
    ASSERT_TRUE(WriteRandomCheckpoint(TinyA(), 9, layout, dir_).ok());
    std::string corpus;
    for (int i = 0; i < 200; ++i) corpus += "the needle " + std::to_string(i * 7919 % 1000) + " ";
    auto tok = TrainByteLevelBpe(corpus, 300, {"<|bos|>", "<|eos|>"});
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    if (extra_token_id >= 0) {
      (*tok)["added_tokens"].push_back({{"id", extra_token_id},
                                        {"content", "<|extra|>"},
                                        {"single_word", false},
                                        {"lstrip", false},
                                        {"rstrip", false},
                                        {"normalized", false},
                                        {"special", true}});
    }
    std::ofstream(dir_ / "tokenizer.json") << tok->dump();
  }

  std::filesystem::path dir_;
};

TEST_F(LoadEngineTest, LoadsRandomCheckpointsAndGenerates) {
  for (CheckpointLayout layout : {CheckpointLayout::kBf16, CheckpointLayout::kFp8Fp4}) {
    std::filesystem::remove_all(dir_);
    WriteModel(layout);
    auto e = LoadEngine(dir_, EngineOptions{});
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ((*e)->model_digest().size(), 64u);
    EXPECT_EQ((*e)->config().n_layers, 3);
    GenerateRequest req;
    req.prompt = (*e)->tokenizer().Encode("the needle 42 the needle 17 the needle");
    ASSERT_FALSE(req.prompt.empty());
    req.max_new_tokens = 4;
    auto r = (*e)->Generate(req);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->tokens.size(), 4u);
  }
}

TEST_F(LoadEngineTest, ErrorsNameTheFile) {
  auto missing = LoadEngine(dir_ / "nope", EngineOptions{});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
  WriteModel(CheckpointLayout::kBf16);
  std::ofstream(dir_ / "config.json") << "{\"hidden_size\": 3}";
  auto bad_config = LoadEngine(dir_, EngineOptions{});
  ASSERT_FALSE(bad_config.ok());
  EXPECT_NE(bad_config.status().message().find("config.json"), std::string::npos)
      << bad_config.status().ToString();
  EngineOptions cuda;
  cuda.backend = "cuda-paged";
  EXPECT_EQ(LoadEngine(dir_, cuda).status().code(), StatusCode::kUnsupported);
}

TEST_F(LoadEngineTest, RejectsTokenizerLargerThanVocabulary) {
  WriteModel(CheckpointLayout::kBf16, 1100);
  auto e = LoadEngine(dir_, EngineOptions{});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("tokenizer.json"), std::string::npos);
}

}  // namespace
}  // namespace nw
