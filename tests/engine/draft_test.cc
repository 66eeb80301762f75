// Greedy drafts (engine/generate.h): BackendSequence::Extend equals Decode of each token bit for
// bit (logits and probes), and Generate with a draft gives exactly what it gives without one, in
// every outcome (the draft accepted, unused, diverging inside the chunk, cut by a stop token or by
// max_new_tokens), on the CPU backends; a counting wrapper shows which path ran, so a draft that
// were silently ignored would fail the "accepted" checks. The GPU backends' Extend is checked on
// the H200 (CudaEngine.GreedyDraftsChangeNothing).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/random_weights.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "tests/cpu_backend/test_model.h"

namespace nw {
namespace {

using cpu::testing::RandomTokens;
using cpu::testing::SmallWindow;

struct Calls {
  int decode = 0;
  int extend = 0;
  int sequences = 0;
};

// A backend that forwards to a real one and counts what Generate asks of its sequences.
class CountingSequence final : public BackendSequence {
 public:
  CountingSequence(std::unique_ptr<BackendSequence> inner, Calls* calls)
      : inner_(std::move(inner)), calls_(calls) {}
  int64_t position() const override { return inner_->position(); }
  int index_topk() const override { return inner_->index_topk(); }
  Status Prefill(std::span<const int32_t> t, std::vector<float>* l) override {
    return inner_->Prefill(t, l);
  }
  Status Decode(int32_t t, std::vector<float>* l) override {
    ++calls_->decode;
    return inner_->Decode(t, l);
  }
  Status Extend(std::span<const int32_t> t, std::vector<float>* l) override {
    ++calls_->extend;
    return inner_->Extend(t, l);
  }
  const std::vector<IndexerProbe>& probes() const override { return inner_->probes(); }
  int64_t state_bytes() const override { return inner_->state_bytes(); }

 private:
  std::unique_ptr<BackendSequence> inner_;
  Calls* calls_;
};

class CountingBackend final : public Backend {
 public:
  CountingBackend(std::unique_ptr<Backend> inner, Calls* calls)
      : inner_(std::move(inner)), calls_(calls) {}
  const BackendInfo& info() const override { return inner_->info(); }
  const ModelConfig& config() const override { return inner_->config(); }
  std::string device() const override { return inner_->device(); }
  Result<std::unique_ptr<BackendSequence>> NewSequence(const SequenceSpec& spec) override {
    ++calls_->sequences;
    NW_ASSIGN_OR_RETURN(std::unique_ptr<BackendSequence> s, inner_->NewSequence(spec));
    return std::unique_ptr<BackendSequence>(
        std::make_unique<CountingSequence>(std::move(s), calls_));
  }
  int64_t state_bytes_per_token(const PrecisionProfile& p) const override {
    return inner_->state_bytes_per_token(p);
  }

 private:
  std::unique_ptr<Backend> inner_;
  Calls* calls_;
};

class DraftTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    cfg_ = SmallWindow();
    auto w = std::make_shared<const ModelWeights>(cpu::RandomModelWeights(cfg_, 11));
    auto b = CreateBackend(GetParam(), cfg_, std::move(w));
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    backend_ = std::make_unique<CountingBackend>(*std::move(b), &calls_);
  }

  GenerateRequest Request(int64_t len, uint64_t seed, int max_new) const {
    GenerateRequest r;
    r.prompt = RandomTokens(len, cfg_.vocab_size, seed);
    r.max_new_tokens = max_new;
    ProbeRequest pr;
    pr.needle_begin = len / 3;
    pr.needle_end = len / 3 + 4;
    pr.query_begin = len - 8;
    pr.keep_topk_sets = true;
    r.probe = pr;
    return r;
  }

  GenerateResult Run(const GenerateRequest& r) {
    calls_ = Calls{};
    auto g = Generate(*backend_, r);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    return g.ok() ? *std::move(g) : GenerateResult{};
  }

  static void ExpectSame(const GenerateResult& a, const GenerateResult& b,
                         const std::string& what) {
    EXPECT_EQ(a.tokens, b.tokens) << what;
    EXPECT_EQ(a.stopped, b.stopped) << what;
    ASSERT_EQ(a.probes.size(), b.probes.size()) << what;
    for (size_t i = 0; i < a.probes.size(); ++i) {
      const IndexerProbe& x = a.probes[i];
      const IndexerProbe& y = b.probes[i];
      EXPECT_EQ(x.positions, y.positions) << what;
      EXPECT_EQ(x.topk_sets, y.topk_sets) << what;
      EXPECT_EQ(x.needle_rank, y.needle_rank) << what;
      EXPECT_EQ(x.in_topk, y.in_topk) << what;
      EXPECT_EQ(x.num_visible, y.num_visible) << what;
      ASSERT_EQ(x.kth_score.size(), y.kth_score.size()) << what;
      EXPECT_EQ(0, std::memcmp(x.kth_score.data(), y.kth_score.data(),
                               x.kth_score.size() * sizeof(float)))
          << what;
    }
  }

  ModelConfig cfg_;
  Calls calls_;
  std::unique_ptr<CountingBackend> backend_;
};

TEST_P(DraftTest, ExtendEqualsDecodeBitForBit) {
  const GenerateRequest r = Request(150, 3, 0);
  const std::vector<int32_t> more = RandomTokens(9, cfg_.vocab_size, 4);
  SequenceSpec spec;
  spec.max_tokens = 160;
  spec.probe = r.probe;
  auto a = backend_->NewSequence(spec);
  auto b = backend_->NewSequence(spec);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<float> la, lb;
  ASSERT_TRUE((*a)->Prefill(r.prompt, &la).ok());
  ASSERT_TRUE((*b)->Prefill(r.prompt, &lb).ok());
  std::vector<float> stepped;
  for (int32_t t : more) {
    ASSERT_TRUE((*a)->Decode(t, &la).ok());
    stepped.insert(stepped.end(), la.begin(), la.end());
  }
  std::vector<float> chunk;
  ASSERT_TRUE((*b)->Extend(more, &chunk).ok());
  ASSERT_EQ(chunk.size(), stepped.size());
  EXPECT_EQ(0, std::memcmp(chunk.data(), stepped.data(), chunk.size() * sizeof(float)));
  GenerateResult pa, pb;
  pa.probes = (*a)->probes();
  pb.probes = (*b)->probes();
  ExpectSame(pa, pb, "probes after Decode x9 vs Extend(9)");
  EXPECT_EQ((*a)->position(), (*b)->position());
}

TEST_P(DraftTest, EveryOutcomeEqualsGreedyWithoutADraft) {
  for (uint64_t seed : {21u, 22u, 23u}) {
    GenerateRequest plain = Request(120 + static_cast<int64_t>(seed), seed, 10);
    const GenerateResult want = Run(plain);
    ASSERT_EQ(want.tokens.size(), 10u);
    ASSERT_EQ(calls_.extend, 0);
    const std::string at = GetParam() + " seed " + std::to_string(seed);

    // Accepted: the draft is greedy's own output. One Extend, then decode steps after it only.
    GenerateRequest r = plain;
    r.draft.assign(want.tokens.begin(), want.tokens.begin() + 6);
    GenerateResult got = Run(r);
    ExpectSame(got, want, at + " accepted");
    EXPECT_EQ(calls_.extend, 1) << at;
    EXPECT_EQ(calls_.sequences, 1) << at;
    EXPECT_EQ(calls_.decode, 10 - 1 - 6) << at;  // steps after the drafted six tokens

    // A draft longer than max_new_tokens allows: fed up to max_new_tokens - 1 tokens.
    r.draft = want.tokens;
    r.draft.push_back(want.tokens[0]);
    got = Run(r);
    ExpectSame(got, want, at + " long draft");
    EXPECT_EQ(calls_.extend, 1) << at;
    EXPECT_EQ(calls_.decode, 0) << at;

    // Unused: the first greedy token is not the draft's. Plain decoding, one sequence.
    r.draft = {(want.tokens[0] + 1) % static_cast<int32_t>(cfg_.vocab_size), want.tokens[1]};
    got = Run(r);
    ExpectSame(got, want, at + " unused");
    EXPECT_EQ(calls_.extend, 0) << at;
    EXPECT_EQ(calls_.sequences, 1) << at;

    // Diverged: greedy leaves the draft at its third token. The request runs again without it.
    r.draft.assign(want.tokens.begin(), want.tokens.begin() + 5);
    r.draft[2] = (r.draft[2] + 1) % static_cast<int32_t>(cfg_.vocab_size);
    got = Run(r);
    ExpectSame(got, want, at + " diverged");
    EXPECT_EQ(calls_.extend, 1) << at;
    EXPECT_EQ(calls_.sequences, 2) << at;

    // A stop token inside the draft: greedy stops there, so the draft is cut before it.
    GenerateRequest stop = plain;
    stop.stop_tokens = {want.tokens[4]};
    const GenerateResult want_stop = Run(stop);
    stop.draft = want.tokens;  // contains the stop token (at index 4, or earlier)
    got = Run(stop);
    ExpectSame(got, want_stop, at + " stop inside the draft");
    EXPECT_EQ(calls_.extend, want.tokens[0] == want.tokens[4] ? 0 : 1) << at;

    // Faults and traces take the plain path (a fault may act on multi-token chunks).
    GenerateRequest faulted = plain;
    faulted.fault = Fault::kRaggedKeyRange;
    const GenerateResult want_fault = Run(faulted);
    faulted.draft.assign(want_fault.tokens.begin(), want_fault.tokens.end());
    got = Run(faulted);
    ExpectSame(got, want_fault, at + " faulted");
    EXPECT_EQ(calls_.extend, 0) << at;
  }
}

TEST_P(DraftTest, ADraftTokenOutsideTheVocabularyIsRefused) {
  GenerateRequest r = Request(40, 5, 4);
  r.draft = {1, static_cast<int32_t>(cfg_.vocab_size)};
  auto g = Generate(*backend_, r);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("draft token id"), std::string::npos)
      << g.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(CpuBackends, DraftTest, ::testing::Values("cpu", "cpu-paged"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

}  // namespace
}  // namespace nw
