// Batched decode (engine/cpu/batch.h): one step for several sequences gives every sequence the
// logits it gets alone, bit for bit; batched generation gives Generate's tokens and probes.
#include "engine/cpu/batch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/checkpoint/loader.h"
#include "engine/cpu/moe.h"
#include "engine/cpu/random_weights.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/text/tokenizer.h"
#include "tests/cpu_backend/test_model.h"

namespace nw::cpu {
namespace {

using testing::MakeSequence;
using testing::RandomTokens;
using testing::SmallWindow;

// Bitwise equality of two float arrays (NaN payloads included), reporting the first difference.
::testing::AssertionResult SameBits(const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(a + i, b + i, sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "differs at " << i << ": " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

void ExpectSameProbes(const std::vector<IndexerProbe>& a, const std::vector<IndexerProbe>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t l = 0; l < a.size(); ++l) {
    EXPECT_EQ(a[l].positions, b[l].positions);
    EXPECT_EQ(a[l].needle_rank, b[l].needle_rank);
    EXPECT_EQ(a[l].in_topk, b[l].in_topk);
    EXPECT_EQ(a[l].topk_sets, b[l].topk_sets);
    EXPECT_EQ(a[l].num_visible, b[l].num_visible);
  }
}

class BatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_ = SmallWindow();
    cfg_.max_position_embeddings = 4096;
    w_ = RandomModelWeights(cfg_, 5);
    w_bf16_ = RequantizeWeights(w_, NumFormat::kBf16);
  }

  // Diverse requests: layouts, top-k, probes, activation rounding, prompt lengths across the
  // window (16) and the compressed blocks (4 and 128).
  std::vector<SequenceOptions> Options() const {
    std::vector<SequenceOptions> v(6);
    v[1].layout = KvLayout::kPaged;
    v[1].prefill_chunk = 64;
    v[2].index_topk = 2;
    v[3].probe = ProbeRequest{10, 14, 0, true};
    v[4].precision.activations = NumFormat::kBf16;
    v[4].precision.kv = NumFormat::kFp8;
    v[5].dense_compressed = true;
    for (auto& o : v) o.max_tokens = 400;
    return v;
  }
  static std::vector<int64_t> PromptLengths() { return {1, 7, 40, 131, 200, 257}; }

  ModelConfig cfg_;
  ModelWeights w_, w_bf16_;
};

TEST_F(BatchTest, ABatchedStepGivesEverySequenceItsLogitsAloneBitForBit) {
  const std::vector<SequenceOptions> opts = Options();
  const std::vector<int64_t> lengths = PromptLengths();
  const size_t B = opts.size();
  std::vector<Sequence> batched, alone;
  std::vector<float> ignored;
  for (size_t i = 0; i < B; ++i) {
    const auto prompt = RandomTokens(lengths[i], static_cast<int>(cfg_.vocab_size), 100 + i);
    batched.push_back(MakeSequence(cfg_, w_, opts[i]));
    alone.push_back(MakeSequence(cfg_, w_, opts[i]));
    ASSERT_TRUE(batched.back().Prefill(prompt, &ignored).ok());
    ASSERT_TRUE(alone.back().Prefill(prompt, &ignored).ok());
  }
  const int64_t V = cfg_.vocab_size;
  std::vector<float> logits, one;
  for (int step = 0; step < 24; ++step) {
    // Requests join and leave the batch: sequence i sits out the steps where (step + i) % 5 == 0.
    std::vector<Sequence*> seqs;
    std::vector<int32_t> tokens;
    std::vector<size_t> who;
    for (size_t i = 0; i < B; ++i) {
      if ((step + static_cast<int>(i)) % 5 == 0) continue;
      seqs.push_back(&batched[i]);
      tokens.push_back(RandomTokens(1, static_cast<int>(V), 1000 * step + i)[0]);
      who.push_back(i);
    }
    ASSERT_TRUE(DecodeBatch(seqs, tokens, &logits).ok());
    ASSERT_EQ(logits.size(), seqs.size() * static_cast<size_t>(V));
    for (size_t k = 0; k < who.size(); ++k) {
      ASSERT_TRUE(alone[who[k]].Decode(tokens[k], &one).ok());
      EXPECT_TRUE(SameBits(logits.data() + static_cast<int64_t>(k) * V, one.data(), V))
          << "step " << step << ", sequence " << who[k];
      EXPECT_EQ(batched[who[k]].position(), alone[who[k]].position());
    }
  }
  for (size_t i = 0; i < B; ++i) ExpectSameProbes(batched[i].probes(), alone[i].probes());
  EXPECT_FALSE(batched[3].probes().empty());
}

TEST_F(BatchTest, SequencesOverOtherWeightsShareAStepAndStillMatch) {
  SequenceOptions o;
  o.max_tokens = 300;
  SequenceOptions bf = o;
  bf.precision.weights = NumFormat::kBf16;
  std::vector<Sequence> batched, alone;
  std::vector<float> ignored;
  const ModelWeights* ws[] = {&w_, &w_bf16_, &w_, &w_bf16_};
  for (int i = 0; i < 4; ++i) {
    const auto prompt = RandomTokens(30 + 17 * i, static_cast<int>(cfg_.vocab_size), 7 + i);
    const SequenceOptions& so = ws[i] == &w_ ? o : bf;
    batched.push_back(MakeSequence(cfg_, *ws[i], so));
    alone.push_back(MakeSequence(cfg_, *ws[i], so));
    ASSERT_TRUE(batched.back().Prefill(prompt, &ignored).ok());
    ASSERT_TRUE(alone.back().Prefill(prompt, &ignored).ok());
  }
  const int64_t V = cfg_.vocab_size;
  std::vector<float> logits, one;
  for (int step = 0; step < 6; ++step) {
    std::vector<Sequence*> seqs;
    std::vector<int32_t> tokens;
    for (int i = 0; i < 4; ++i) {
      seqs.push_back(&batched[static_cast<size_t>(i)]);
      tokens.push_back((step * 31 + i * 7) % static_cast<int32_t>(V));
    }
    ASSERT_TRUE(DecodeBatch(seqs, tokens, &logits).ok());
    for (size_t k = 0; k < 4; ++k) {
      ASSERT_TRUE(alone[k].Decode(tokens[k], &one).ok());
      EXPECT_TRUE(SameBits(logits.data() + static_cast<int64_t>(k) * V, one.data(), V))
          << "step " << step << ", sequence " << k;
    }
  }
  // The two weight formats give different logits (the grouping matters).
  EXPECT_FALSE(SameBits(logits.data(), logits.data() + V, V));
}

TEST_F(BatchTest, AnInvalidBatchChangesNoSequence) {
  SequenceOptions o;
  o.max_tokens = 21;
  Sequence a = MakeSequence(cfg_, w_, o);
  Sequence b = MakeSequence(cfg_, w_, o);
  std::vector<float> logits;
  ASSERT_TRUE(a.Prefill(RandomTokens(20, static_cast<int>(cfg_.vocab_size), 1), &logits).ok());
  ASSERT_TRUE(b.Prefill(RandomTokens(10, static_cast<int>(cfg_.vocab_size), 2), &logits).ok());
  Sequence* both[] = {&a, &b};
  const int32_t bad_id[] = {3, static_cast<int32_t>(cfg_.vocab_size)};
  EXPECT_EQ(DecodeBatch(both, bad_id, &logits).code(), StatusCode::kInvalidArgument);
  Sequence* twice[] = {&b, &b};
  const int32_t ok[] = {3, 4};
  EXPECT_EQ(DecodeBatch(twice, ok, &logits).code(), StatusCode::kInvalidArgument);
  const int32_t one_token[] = {3};
  EXPECT_EQ(DecodeBatch(both, one_token, &logits).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(DecodeBatch(both, ok, &logits).ok());  // a reaches its capacity of 21
  EXPECT_EQ(DecodeBatch(both, ok, &logits).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(a.position(), 21);
  EXPECT_EQ(b.position(), 11);
}

TEST_F(BatchTest, BatchedGenerationGivesGeneratesTokensAndProbes) {
  for (const char* name : {"cpu", "cpu-paged"}) {
    SCOPED_TRACE(name);
    auto backend = CreateBackend(name, cfg_, std::make_shared<const ModelWeights>(w_));
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    Backend& be = **backend;
    std::vector<GenerateRequest> reqs(5);
    for (size_t i = 0; i < reqs.size(); ++i) {
      reqs[i].prompt = RandomTokens(20 + 45 * static_cast<int64_t>(i),
                                    static_cast<int>(cfg_.vocab_size), 40 + i);
      reqs[i].max_new_tokens = 6 + 5 * static_cast<int>(i);
    }
    reqs[1].index_topk = 1;
    reqs[2].probe = ProbeRequest{5, 9, 3, true};
    reqs[3].precision.weights = NumFormat::kBf16;  // its own pass over the requantized copy
    reqs[4].max_new_tokens = 0;
    // Request 0 stops early: on the third token it generates alone.
    auto probe = nw::Generate(be, reqs[0]);
    ASSERT_TRUE(probe.ok());
    reqs[0].stop_tokens = {probe->tokens[2]};
    auto batched = nw::GenerateBatch(be, reqs);
    ASSERT_TRUE(batched.ok()) << batched.status().ToString();
    ASSERT_EQ(batched->size(), reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      auto alone = nw::Generate(be, reqs[i]);
      ASSERT_TRUE(alone.ok());
      EXPECT_EQ((*batched)[i].tokens, alone->tokens) << "request " << i;
      EXPECT_EQ((*batched)[i].stopped, alone->stopped) << "request " << i;
      ExpectSameProbes((*batched)[i].probes, alone->probes);
    }
    EXPECT_TRUE((*batched)[0].stopped);
    EXPECT_LE((*batched)[0].tokens.size(), 3u);
    EXPECT_TRUE((*batched)[4].tokens.empty());
    EXPECT_FALSE((*batched)[2].probes.empty());
  }
}

TEST_F(BatchTest, MoeOverRowsEqualsMoeRowByRowIncludingRepeatedHashExperts) {
  // Layer 0 is a hash layer: token 5 routes to one expert twice, token 9 to two others.
  ModelWeights w = w_;
  FfnWeights& hash = w.layers[0].ffn;
  const int k = cfg_.n_activated_experts;
  ASSERT_GE(k, 2);
  for (int s = 0; s < k; ++s) {
    hash.tid2eid[static_cast<size_t>(5 * k + s)] = 1;
    hash.tid2eid[static_cast<size_t>(9 * k + s)] = s % 2 == 0 ? 2 : 0;
  }
  const int64_t D = cfg_.dim;
  const std::vector<int32_t> tokens = {5, 9, 5, 3, 9, 5, 7};
  const auto rows = static_cast<int64_t>(tokens.size());
  std::vector<float> x(static_cast<size_t>(rows * D));
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(static_cast<int>(i * 37 % 101) - 50) / 40.0f;
  }
  for (int layer : {0, 1}) {
    SCOPED_TRACE(layer);
    std::vector<float> together(x.size()), alone(x.size());
    MoeForwardRows(cfg_, w.layers[static_cast<size_t>(layer)].ffn, layer, x.data(), tokens.data(),
                   rows, together.data());
    for (int64_t t = 0; t < rows; ++t) {
      MoeForward(cfg_, w.layers[static_cast<size_t>(layer)].ffn, layer, x.data() + t * D,
                 tokens[static_cast<size_t>(t)], alone.data() + t * D);
    }
    EXPECT_TRUE(SameBits(together.data(), alone.data(), rows * D));
    for (float v : together) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST_F(BatchTest, TheEngineApiBatchesAndReportsBadRequests) {
  auto engine = CreateEngine(cfg_, Tokenizer(), w_, "d", EngineOptions{});
  ASSERT_TRUE(engine.ok());
  std::vector<GenerateRequest> reqs(3);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].prompt =
        RandomTokens(50 + 10 * static_cast<int64_t>(i), static_cast<int>(cfg_.vocab_size), 9 + i);
    reqs[i].max_new_tokens = 8;
  }
  reqs[2].precision.weights = NumFormat::kBf16;
  auto batched = (*engine)->GenerateBatch(reqs);
  ASSERT_TRUE(batched.ok()) << batched.status().ToString();
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto alone = (*engine)->Generate(reqs[i]);
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ((*batched)[i].tokens, alone->tokens);
  }
  reqs[1].prompt.clear();
  EXPECT_EQ((*engine)->GenerateBatch(reqs).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nw::cpu
