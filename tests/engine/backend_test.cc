// The engine's backend seam: the catalog (engine/backend_catalog.h), CreateBackend and
// AvailableBackends (engine/engine.h), the CPU backends behind it (engine/cpu/cpu_backend.h,
// engine/parallel/pd_backend.h), the backend-agnostic drivers (engine/generate.h) and the weight
// cache (engine/weight_cache.h).
#include "engine/backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/backend_catalog.h"
#include "engine/checkpoint/loader.h"
#include "engine/cpu/random_weights.h"
#include "engine/cpu/sequence.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/weight_cache.h"
#include "tests/cpu_backend/test_model.h"

namespace nw {
namespace {

using cpu::testing::RandomTokens;
using cpu::testing::TinyA;

const char* const kCpuNames[] = {"cpu", "cpu-paged", "cpu-pd"};

class BackendTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> Make(const std::string& name) {
    auto b = CreateBackend(name, cfg_, w_);
    EXPECT_TRUE(b.ok()) << name << ": " << b.status().ToString();
    return b.ok() ? *std::move(b) : nullptr;
  }
  GenerateRequest Request(int64_t len, uint64_t seed, int new_tokens) const {
    GenerateRequest r;
    r.prompt = RandomTokens(len, cfg_.vocab_size, seed);
    r.max_new_tokens = new_tokens;
    return r;
  }

  ModelConfig cfg_ = TinyA();
  std::shared_ptr<const ModelWeights> w_ =
      std::make_shared<const ModelWeights>(cpu::RandomModelWeights(cfg_, 5));
};

void ExpectSameProbes(const std::vector<IndexerProbe>& a, const std::vector<IndexerProbe>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].layer, b[i].layer);
    EXPECT_EQ(a[i].positions, b[i].positions);
    EXPECT_EQ(a[i].needle_rank, b[i].needle_rank);
    EXPECT_EQ(a[i].in_topk, b[i].in_topk);
    EXPECT_EQ(a[i].num_visible, b[i].num_visible);
    EXPECT_EQ(a[i].topk_sets, b[i].topk_sets);
    ASSERT_EQ(a[i].kth_score.size(), b[i].kth_score.size());
    EXPECT_EQ(0, std::memcmp(a[i].kth_score.data(), b[i].kth_score.data(),
                             a[i].kth_score.size() * sizeof(float)));
  }
}

TEST(BackendCatalog, NamesAreUniqueAndFound) {
  std::set<std::string> seen;
  for (const BackendInfo& b : BackendCatalog()) {
    EXPECT_TRUE(seen.insert(std::string(b.name)).second) << b.name;
    EXPECT_EQ(FindBackend(b.name), &b);
    EXPECT_FALSE(b.summary.empty());
  }
  EXPECT_EQ(FindBackend("cuda-fast"), nullptr);
  EXPECT_EQ(FindBackend(""), nullptr);
  const std::vector<std::string> names = BackendNames();
  ASSERT_EQ(names.size(), BackendCatalog().size());
  EXPECT_EQ(names.front(), "cpu");  // CPU first
  for (const char* n : {"cpu", "cpu-paged", "cpu-pd", "cuda", "cuda-paged"}) {
    EXPECT_NE(FindBackend(n), nullptr) << n;
  }
  EXPECT_EQ(FindBackend("cuda")->device, DeviceKind::kCuda);
  EXPECT_EQ(FindBackend("cpu-paged")->layout, KvLayout::kPaged);
  EXPECT_TRUE(FindBackend("cpu-pd")->disaggregated);
  EXPECT_EQ(DeviceKindName(DeviceKind::kCuda), "cuda");
  EXPECT_EQ(DeviceKindName(DeviceKind::kCpu), "cpu");
}

TEST(BackendCatalog, AvailableBackendsAreCatalogNamesCpuAlways) {
  const std::vector<std::string> available = AvailableBackends();
  for (const std::string& n : available) EXPECT_NE(FindBackend(n), nullptr) << n;
  for (const char* n : kCpuNames) {
    EXPECT_NE(std::find(available.begin(), available.end(), n), available.end()) << n;
    EXPECT_TRUE(BackendAvailableHere(n).ok()) << n;
  }
#ifndef NW_HAVE_CUDA_BACKEND
  EXPECT_EQ(available, (std::vector<std::string>{"cpu", "cpu-paged", "cpu-pd"}));
#endif
}

TEST_F(BackendTest, CreateBackendErrors) {
  auto unknown = CreateBackend("tpu", cfg_, w_);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  for (const std::string& n : BackendNames()) {
    EXPECT_NE(unknown.status().message().find(n), std::string::npos) << n;
  }
#ifndef NW_HAVE_CUDA_BACKEND
  for (const char* n : {"cuda", "cuda-paged", "cuda-pd"}) {
    auto cuda = CreateBackend(n, cfg_, w_);
    ASSERT_FALSE(cuda.ok());
    EXPECT_EQ(cuda.status().code(), StatusCode::kUnsupported) << n;
    EXPECT_NE(cuda.status().message().find("-DNW_CUDA=ON"), std::string::npos)
        << cuda.status().ToString();
    EXPECT_EQ(BackendAvailableHere(n).code(), StatusCode::kUnsupported);
  }
#endif
  ModelConfig bad = cfg_;
  bad.head_dim = 3;
  EXPECT_FALSE(CreateBackend("cpu", bad, w_).ok());
  EXPECT_EQ(CreateBackend("cpu", cfg_, nullptr).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(BackendTest, InfoDeviceAndStateBytesPerToken) {
  for (const char* n : kCpuNames) {
    SCOPED_TRACE(n);
    auto b = Make(n);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->info().name, n);
    EXPECT_EQ(b->device(), "cpu");
    EXPECT_EQ(b->config().dim, cfg_.dim);
    EXPECT_GT(b->state_bytes_per_token(PrecisionProfile{}), 0);
  }
  // By hand for TinyA: head_dim values per `ratio` tokens per compressed layer, index_head_dim
  // per 4 tokens per ratio-4 layer, 4 bytes each.
  double want = 0;
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const int r = cfg_.ratio(l);
    if (r > 0) want += 4.0 * cfg_.head_dim / r;
    if (r == 4) want += 4.0 * cfg_.index_head_dim / 4;
  }
  EXPECT_EQ(Make("cpu")->state_bytes_per_token(PrecisionProfile{}),
            static_cast<int64_t>(std::ceil(want)));
}

TEST_F(BackendTest, GenerateEqualsAHandDrivenSequence) {
  GenerateRequest req = Request(150, 3, 5);
  ProbeRequest probe;
  probe.needle_begin = 20;
  probe.needle_end = 28;
  probe.query_begin = 100;
  probe.keep_topk_sets = true;
  req.probe = probe;
  // The old path: a cpu::Sequence with the request's options, prefill, argmax decode.
  cpu::SequenceOptions o;
  o.probe = probe;
  o.max_tokens = 155;
  auto seq = cpu::Sequence::Create(cfg_, *w_, o);
  ASSERT_TRUE(seq.ok());
  std::vector<float> logits;
  ASSERT_TRUE(seq->Prefill(req.prompt, &logits).ok());
  std::vector<int32_t> want;
  for (int i = 0; i < req.max_new_tokens; ++i) {
    want.push_back(Argmax(logits.data(), cfg_.vocab_size));
    if (i + 1 < req.max_new_tokens) {
      ASSERT_TRUE(seq->Decode(want.back(), &logits).ok());
    }
  }
  for (const char* n : kCpuNames) {
    SCOPED_TRACE(n);
    auto b = Make(n);
    ASSERT_NE(b, nullptr);
    auto got = Generate(*b, req);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->tokens, want);
    EXPECT_FALSE(got->stopped);
    ExpectSameProbes(got->probes, seq->probes());
  }
  // cpu-pd step by step (NewSequence: prefill instance, transfer at the first decode) gives the
  // same as its whole-request path.
  auto pd = Make("cpu-pd");
  auto spec = CheckRequest(cfg_, req);
  ASSERT_TRUE(spec.ok());
  auto ps = pd->NewSequence(*spec);
  ASSERT_TRUE(ps.ok()) << ps.status().ToString();
  ASSERT_TRUE((*ps)->Prefill(req.prompt, &logits).ok());
  GenerateResult stepwise;
  ASSERT_TRUE(DecodeGreedy(cfg_, req, ps->get(), &logits, &stepwise).ok());
  EXPECT_EQ(stepwise.tokens, want);
  ExpectSameProbes((*ps)->probes(), seq->probes());
  EXPECT_GT((*ps)->state_bytes(), 0);
}

TEST_F(BackendTest, CheckRequestRejectsBadRequests) {
  GenerateRequest r;
  EXPECT_EQ(CheckRequest(cfg_, r).status().code(), StatusCode::kInvalidArgument);  // empty
  r = Request(10, 1, 4);
  r.prompt[3] = cfg_.vocab_size;
  EXPECT_EQ(CheckRequest(cfg_, r).status().code(), StatusCode::kInvalidArgument);
  r.prompt[3] = -1;
  EXPECT_EQ(CheckRequest(cfg_, r).status().code(), StatusCode::kInvalidArgument);
  r = Request(10, 1, -1);
  EXPECT_EQ(CheckRequest(cfg_, r).status().code(), StatusCode::kInvalidArgument);
  r = Request(10, 1, 4);
  r.index_topk = -1;
  EXPECT_EQ(CheckRequest(cfg_, r).status().code(), StatusCode::kInvalidArgument);
  r = Request(10, 1, cfg_.max_position_embeddings);
  EXPECT_EQ(CheckRequest(cfg_, r).status().code(), StatusCode::kOutOfRange);
  r = Request(10, 1, 4);
  r.precision.kv = NumFormat::kMxfp4;
  EXPECT_EQ(CheckRequest(cfg_, r).status().code(), StatusCode::kInvalidArgument);
  r.precision.kv = NumFormat::kFp32;
  r.index_topk = 3;
  auto spec = CheckRequest(cfg_, r);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->max_tokens, 14);
  EXPECT_EQ(spec->index_topk, 3);
}

TEST_F(BackendTest, DecodeBatchEqualsDecodeOneByOne) {
  for (const char* n : kCpuNames) {
    SCOPED_TRACE(n);
    auto b = Make(n);
    ASSERT_NE(b, nullptr);
    std::vector<GenerateRequest> reqs = {Request(40, 1, 8), Request(97, 2, 8), Request(13, 3, 8)};
    reqs[1].precision.weights = NumFormat::kBf16;  // another set of weights: its own pass
    reqs[2].index_topk = 2;
    std::vector<std::unique_ptr<BackendSequence>> batched, alone;
    for (const GenerateRequest& r : reqs) {
      auto spec = CheckRequest(cfg_, r);
      ASSERT_TRUE(spec.ok());
      for (auto* set : {&batched, &alone}) {
        auto s = b->NewSequence(*spec);
        ASSERT_TRUE(s.ok()) << s.status().ToString();
        std::vector<float> logits;
        ASSERT_TRUE((*s)->Prefill(r.prompt, &logits).ok());
        set->push_back(*std::move(s));
      }
    }
    const int64_t V = cfg_.vocab_size;
    for (int step = 0; step < 3; ++step) {
      std::vector<BackendSequence*> seqs;
      std::vector<int32_t> tokens;
      for (size_t i = 0; i < reqs.size(); ++i) {
        seqs.push_back(batched[i].get());
        tokens.push_back(static_cast<int32_t>((7 * i + 3 * step + 1) % V));
      }
      std::vector<float> logits;
      ASSERT_TRUE(b->DecodeBatch(seqs, tokens, &logits).ok());
      ASSERT_EQ(logits.size(), reqs.size() * static_cast<size_t>(V));
      for (size_t i = 0; i < reqs.size(); ++i) {
        std::vector<float> one;
        ASSERT_TRUE(alone[i]->Decode(tokens[i], &one).ok());
        EXPECT_EQ(0, std::memcmp(one.data(), logits.data() + i * static_cast<size_t>(V),
                                 one.size() * sizeof(float)))
            << "sequence " << i << " step " << step;
        EXPECT_EQ(batched[i]->position(), alone[i]->position());
      }
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_GT(batched[i]->state_bytes(), 0);
      EXPECT_EQ(batched[i]->state_bytes(), alone[i]->state_bytes());
    }
  }
}

TEST_F(BackendTest, CpuDecodeBatchRefusesAnotherBackendsSequence) {
  auto a = Make("cpu");
  auto b = Make("cpu");
  auto spec = CheckRequest(cfg_, Request(10, 1, 2));
  ASSERT_TRUE(spec.ok());
  auto sa = a->NewSequence(*spec);
  auto sb = b->NewSequence(*spec);
  ASSERT_TRUE(sa.ok() && sb.ok());
  std::vector<float> logits;
  ASSERT_TRUE((*sa)->Prefill(Request(10, 1, 2).prompt, &logits).ok());
  ASSERT_TRUE((*sb)->Prefill(Request(10, 1, 2).prompt, &logits).ok());
  BackendSequence* both[] = {sa->get(), sb->get()};
  const int32_t tokens[] = {1, 2};
  EXPECT_FALSE(a->DecodeBatch(both, tokens, &logits).ok());  // configs of two backends
  EXPECT_EQ((*sa)->position(), 10);
}

TEST_F(BackendTest, GenerateBatchEqualsGenerateOnEveryCpuBackend) {
  for (const char* n : kCpuNames) {
    SCOPED_TRACE(n);
    auto b = Make(n);
    ASSERT_NE(b, nullptr);
    std::vector<GenerateRequest> reqs = {Request(30, 1, 6), Request(70, 2, 3), Request(9, 3, 0)};
    reqs[0].precision.weights = NumFormat::kFp8;
    auto batched = GenerateBatch(*b, reqs);
    ASSERT_TRUE(batched.ok()) << batched.status().ToString();
    for (size_t i = 0; i < reqs.size(); ++i) {
      auto one = Generate(*b, reqs[i]);
      ASSERT_TRUE(one.ok());
      EXPECT_EQ((*batched)[i].tokens, one->tokens) << i;
      EXPECT_EQ((*batched)[i].stopped, one->stopped) << i;
    }
    reqs[1].prompt.clear();
    auto bad = GenerateBatch(*b, reqs);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("request 1"), std::string::npos)
        << bad.status().ToString();
  }
}

TEST_F(BackendTest, WeightCacheMakesEachFormatOnce) {
  WeightCache cache(w_);
  EXPECT_EQ(cache.Get(NumFormat::kFp32), w_);
  auto bf16 = cache.Get(NumFormat::kBf16);
  ASSERT_NE(bf16, nullptr);
  EXPECT_NE(bf16, w_);
  EXPECT_EQ(cache.Get(NumFormat::kBf16), bf16);
  const ModelWeights want = RequantizeWeights(*w_, NumFormat::kBf16);
  ASSERT_EQ(want.embed.data.size(), bf16->embed.data.size());
  EXPECT_EQ(0, std::memcmp(want.embed.data.data(), bf16->embed.data.data(),
                           want.embed.data.size() * sizeof(float)));
}

// Issue 19: a NaN or infinite logit ends generation with a non-retryable error (the worker's
// engine_error), never a token picked from garbage that would score as a "miss".
class NanAfterSequence : public BackendSequence {
 public:
  explicit NanAfterSequence(int good_steps) : good_steps_(good_steps) {}
  int64_t position() const override { return pos_; }
  int index_topk() const override { return 0; }
  Status Prefill(std::span<const int32_t> tokens, std::vector<float>* logits) override {
    pos_ += static_cast<int64_t>(tokens.size());
    Fill(logits);
    return Status::Ok();
  }
  Status Decode(int32_t, std::vector<float>* logits) override {
    ++pos_;
    Fill(logits);
    return Status::Ok();
  }
  const std::vector<IndexerProbe>& probes() const override { return probes_; }
  int64_t state_bytes() const override { return 0; }

 private:
  void Fill(std::vector<float>* logits) {
    logits->assign(8, 0.0f);
    (*logits)[1] = 1.0f;
    if (steps_++ >= good_steps_) (*logits)[5] = std::nanf("");
  }
  int good_steps_;
  int steps_ = 0;
  int64_t pos_ = 0;
  std::vector<IndexerProbe> probes_;
};

TEST(GenerateTest, NonFiniteLogitsAreANonRetryableError) {
  ModelConfig cfg;
  cfg.vocab_size = 8;
  GenerateRequest req;
  req.prompt = {1, 2};
  req.max_new_tokens = 5;
  NanAfterSequence seq(/*good_steps=*/2);
  std::vector<float> logits;
  ASSERT_TRUE(seq.Prefill(req.prompt, &logits).ok());
  GenerateResult result;
  Status st = DecodeGreedy(cfg, req, &seq, &logits, &result);
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_FALSE(IsRetryable(st.code()));
  EXPECT_NE(st.message().find("non-finite logit (NaN) for token 5 at generated token 2"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(result.tokens, (std::vector<int32_t>{1, 1}));
  std::vector<float> inf(8, 0.0f);
  inf[3] = -INFINITY;
  EXPECT_NE(CheckLogitsFinite(inf.data(), 8, 0).message().find("infinity"), std::string::npos);
}

}  // namespace
}  // namespace nw
