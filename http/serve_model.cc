#include "http/serve_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "common/splitmix64.h"
#include "common/stopwatch.h"
#include "engine/engine.h"
#include "engine/generate.h"

namespace nw {
namespace {

// The earliest occurrence of any stop string in `text`, as (position, index), or npos.
std::pair<size_t, size_t> FindStop(const std::string& text, const std::vector<std::string>& stop) {
  size_t best = std::string::npos, which = 0;
  for (size_t i = 0; i < stop.size(); ++i) {
    const size_t at = text.find(stop[i]);
    if (at < best) {
      best = at;
      which = i;
    }
  }
  return {best, which};
}

}  // namespace

int32_t SampleToken(const std::vector<float>& logits, double temperature, double top_p,
                    uint64_t* state, int top_k) {
  const size_t n = logits.size();
  double max_logit = -INFINITY;
  for (float l : logits) {
    if (std::isfinite(l)) max_logit = std::max(max_logit, static_cast<double>(l));
  }
  std::vector<double> p(n, 0.0);
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(logits[i])) continue;
    p[i] = std::exp((static_cast<double>(logits[i]) - max_logit) / temperature);
    total += p[i];
  }
  // Candidates by probability, highest first (ties to the lower id), cut at top_p.
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)];
  });
  size_t keep = 0;
  double kept = 0;
  const size_t max_keep = top_k > 0 ? std::min(n, static_cast<size_t>(top_k)) : n;
  while (keep < max_keep && (keep == 0 || kept < top_p * total)) {
    kept += p[static_cast<size_t>(order[keep])];
    ++keep;
  }
  // One step of the SplitMix64 stream in *state, uniform in [0, 1) with 53 bits.
  const double u = static_cast<double>(Mix64(*state += kSplitMix64Gamma) >> 11) * 0x1.0p-53 * kept;
  double acc = 0;
  for (size_t k = 0; k < keep; ++k) {
    acc += p[static_cast<size_t>(order[k])];
    if (u < acc) return order[k];
  }
  return order[keep - 1];
}

ServeModel::~ServeModel() = default;

Result<std::unique_ptr<ServeModel>> ServeModel::Load(const std::filesystem::path& dir,
                                                     const std::string& backend) {
  if (Status s = BackendAvailableHere(backend); !s.ok()) {
    return s.WithContext("nw serve --backend " + backend);
  }
  NW_ASSIGN_OR_RETURN(LoadedModel loaded, LoadModelFolder(dir));
  auto impl = CreateBackend(backend, loaded.config,
                            std::make_shared<const ModelWeights>(std::move(loaded.weights)));
  if (!impl.ok()) return impl.status().WithContext(loaded.files.dir.string());
  auto m = std::make_unique<ServeModel>(Private{});
  m->tokenizer_ = std::move(loaded.tokenizer);
  m->digest_ = loaded.files.digest;
  m->backend_ = backend;
  m->backend_impl_ = *std::move(impl);
  return m;
}

Result<std::unique_ptr<ServeGeneration>> ServeModel::Start(const ServeRequest& request) {
  if (request.prompt.empty()) return Status::InvalidArgument("the prompt is empty");
  if (request.max_tokens < (request.prompt_logprobs ? 0 : 1)) {
    return Status::InvalidArgument(
        "max_tokens must be >= 1 (0 only to score the prompt: echo "
        "with logprobs)");
  }
  if (request.prompt_logprobs && request.logprobs < 0) {
    return Status::InvalidArgument("prompt logprobs need logprobs >= 0");
  }
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= config().vocab_size) {
      return Status::InvalidArgument("prompt token id " + std::to_string(id) +
                                     " is outside the vocabulary [0, " +
                                     std::to_string(config().vocab_size) + ")");
    }
  }
  if (request.index_topk < 0) return Status::InvalidArgument("index_topk must be >= 0");
  NW_RETURN_IF_ERROR(request.precision.Validate());
  const ModelConfig& cfg = config();
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
  if (cfg.max_position_embeddings > 0 && total > cfg.max_position_embeddings) {
    return Status::OutOfRange("the prompt (" + std::to_string(request.prompt.size()) +
                              " tokens) plus max_tokens (" + std::to_string(request.max_tokens) +
                              ") exceeds the model's context of " +
                              std::to_string(cfg.max_position_embeddings) + " tokens");
  }
  SequenceSpec spec;
  spec.index_topk = request.index_topk;
  spec.precision = request.precision;
  spec.fault = request.fault;
  if (request.return_indexer_topk) {
    ProbeRequest probe;  // every position, no needle: only the top-k sets are wanted
    probe.keep_topk_sets = true;
    spec.probe = probe;
  }
  spec.max_tokens = total;
  NW_ASSIGN_OR_RETURN(std::unique_ptr<BackendSequence> seq, backend_impl_->NewSequence(spec));
  return std::make_unique<ServeGeneration>(ServeGeneration::Private{}, *this, request,
                                           std::move(seq));
}

Status ServeModel::DecodeStep(std::span<ServeGeneration* const> gens) {
  std::vector<BackendSequence*> seqs;
  std::vector<int32_t> tokens;
  for (ServeGeneration* g : gens) {
    if (!g->decoding())
      return Status::FailedPrecondition("a generation in a decode step is not decoding");
    seqs.push_back(g->seq_.get());
    tokens.push_back(g->result_.tokens.back());
  }
  std::vector<float> logits;
  NW_RETURN_IF_ERROR(backend_impl_->DecodeBatch(seqs, tokens, &logits));
  const int64_t V = config().vocab_size;
  for (size_t i = 0; i < gens.size(); ++i)
    gens[i]->Next(logits.data() + static_cast<int64_t>(i) * V);
  return Status::Ok();
}

Result<ServeResult> ServeModel::Generate(const ServeRequest& request) {
  NW_ASSIGN_OR_RETURN(std::unique_ptr<ServeGeneration> gen, Start(request));
  if (request.cancel != nullptr && request.cancel->load()) {
    return Status::Cancelled("the request was cancelled");
  }
  // The whole prompt as the backend chunks it (BackendInfo::prefill_chunk: one pass on "cpu",
  // 256-token chunks on "cpu-paged"); the sequence does the chunking.
  NW_RETURN_IF_ERROR(gen->PrefillChunk(gen->prompt_left()));
  while (gen->decoding()) {
    if (request.cancel != nullptr && request.cancel->load()) {
      return Status::Cancelled("the request was cancelled");
    }
    ServeGeneration* one[] = {gen.get()};
    NW_RETURN_IF_ERROR(DecodeStep(one));
  }
  return gen->TakeResult();
}

ServeGeneration::ServeGeneration(Private, const ServeModel& model, ServeRequest request,
                                 std::unique_ptr<BackendSequence> seq)
    : model_(model), request_(std::move(request)), seq_(std::move(seq)), rng_(request_.seed) {
  stop_ids_ = request_.stop_token_ids;
  const int eos = model_.config().eos_token_id;
  if (!request_.ignore_eos && eos >= 0) stop_ids_.push_back(eos);
  result_.finish_reason = "length";
}

ServeGeneration::~ServeGeneration() = default;

Status ServeGeneration::PrefillChunk(int64_t max_tokens) {
  if (prompt_left() == 0) return Status::FailedPrecondition("the prompt has run already");
  if (max_tokens < 1) return Status::InvalidArgument("a prefill chunk needs at least one token");
  if (!prefill_started_) {
    prefill_started_ = true;
    prefill_start_ = std::chrono::steady_clock::now();
  }
  const int64_t n = std::min(max_tokens, prompt_left());
  const std::span<const int32_t> chunk(request_.prompt.data() + prefilled_, static_cast<size_t>(n));
  std::vector<float> logits;
  const bool last = n == prompt_left();
  if (request_.prompt_logprobs) {
    // Every prompt token's logprob needs the logits of the position before it: the chunk runs
    // one token at a time (the results do not depend on the pieces, engine/backend.h).
    if (prefilled_ == 0) AddLogprob(nullptr, request_.prompt[0]);
    for (int64_t i = 0; i < n; ++i) {
      NW_RETURN_IF_ERROR(seq_->Prefill(chunk.subspan(static_cast<size_t>(i), 1), &logits));
      const int64_t next = prefilled_ + i + 1;
      if (next < prompt_tokens()) {
        AddLogprob(logits.data(), request_.prompt[static_cast<size_t>(next)]);
      }
    }
  } else {
    NW_RETURN_IF_ERROR(seq_->Prefill(chunk, last ? &logits : nullptr));
  }
  prefilled_ += n;
  if (last) {
    result_.prefill_ms = MsSince(prefill_start_);
    decode_start_ = std::chrono::steady_clock::now();
    if (request_.max_tokens == 0) {
      finished_ = true;  // scoring the prompt only
    } else {
      Next(logits.data());
    }
  }
  return Status::Ok();
}

void ServeGeneration::AddLogprob(const float* logits, int32_t token) {
  TokenLogprob t;
  t.token = token;
  if (logits != nullptr) {
    const int64_t V = model_.config().vocab_size;
    double max_logit = -INFINITY;
    for (int64_t i = 0; i < V; ++i) {
      if (std::isfinite(logits[i])) max_logit = std::max(max_logit, static_cast<double>(logits[i]));
    }
    double total = 0;
    for (int64_t i = 0; i < V; ++i) {
      if (std::isfinite(logits[i])) total += std::exp(static_cast<double>(logits[i]) - max_logit);
    }
    const double log_z = max_logit + std::log(total);
    auto logprob = [&](int32_t id) { return static_cast<double>(logits[id]) - log_z; };
    t.logprob = logprob(token);
    const int64_t n = std::min<int64_t>(request_.logprobs, V);
    std::vector<int32_t> ids(static_cast<size_t>(V));
    std::iota(ids.begin(), ids.end(), 0);
    // NaN sorts last, so the order stays a strict weak ordering.
    auto key = [&](int32_t i) { return std::isnan(logits[i]) ? -INFINITY : logits[i]; };
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
      return key(a) > key(b) || (key(a) == key(b) && a < b);
    });
    for (int64_t k = 0; k < n; ++k)
      t.top.emplace_back(ids[static_cast<size_t>(k)], logprob(ids[static_cast<size_t>(k)]));
  }
  result_.logprobs.push_back(std::move(t));
}

void ServeGeneration::Next(const float* logits) {
  const int64_t V = model_.config().vocab_size;
  std::vector<float> masked;
  if (static_cast<int>(result_.tokens.size()) < request_.min_tokens) {
    // min_tokens: the stop tokens cannot be picked yet.
    masked.assign(logits, logits + V);
    for (int32_t id : stop_ids_) {
      if (id >= 0 && id < V) masked[static_cast<size_t>(id)] = -INFINITY;
    }
    logits = masked.data();
  }
  const int32_t next =
      request_.temperature > 0
          ? SampleToken(std::vector<float>(logits, logits + V), request_.temperature,
                        request_.top_p, &rng_, request_.top_k)
          : Argmax(logits, V);
  if (request_.logprobs >= 0) AddLogprob(logits, next);
  result_.tokens.push_back(next);
  if (std::find(stop_ids_.begin(), stop_ids_.end(), next) != stop_ids_.end()) {
    result_.finish_reason = "stop";
    result_.matched_stop = next;
    finished_ = true;
  } else if (!request_.stop.empty() &&
             FindStop(model_.tokenizer().Decode(result_.tokens), request_.stop).first !=
                 std::string::npos) {
    result_.finish_reason = "stop";
    finished_ = true;
  } else if (static_cast<int>(result_.tokens.size()) == request_.max_tokens) {
    finished_ = true;
  }
  if (finished_) result_.decode_ms = MsSince(decode_start_);
}

std::string ServeGeneration::StreamableText() const {
  std::string text = model_.tokenizer().Decode(result_.tokens);
  size_t hold = 0;
  for (const std::string& s : request_.stop) hold = std::max(hold, s.size() - 1);
  text.resize(text.size() - std::min(hold, text.size()));
  // An incomplete UTF-8 character at the end waits for its continuation bytes.
  size_t lead = text.size();
  for (size_t back = 1; back <= 3 && back <= text.size(); ++back) {
    const auto c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xC0) != 0x80) {
      lead = text.size() - back;
      break;
    }
  }
  if (lead < text.size()) {
    const auto c = static_cast<unsigned char>(text[lead]);
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (text.size() - lead < need) text.resize(lead);
  }
  return text;
}

ServeResult ServeGeneration::TakeResult() {
  ServeResult r = std::move(result_);
  result_ = ServeResult{};
  std::vector<int32_t> text_tokens = r.tokens;
  if (r.matched_stop.is_number()) text_tokens.pop_back();
  r.text = model_.tokenizer().Decode(text_tokens);
  if (!request_.stop.empty()) {
    auto [at, which] = FindStop(r.text, request_.stop);
    if (at != std::string::npos) {
      r.text.resize(at);
      r.finish_reason = "stop";
      r.matched_stop = request_.stop[which];
    }
  }

  if (request_.return_indexer_topk) {
    // The model ran positions 0 .. prompt + generated - 2 (the last token is never fed back);
    // the probes hold one row per position run, in order.
    const std::vector<IndexerProbe>& probes = seq_->probes();
    r.indexer_rows = static_cast<int64_t>(request_.prompt.size() + r.tokens.size()) - 1;
    r.indexer_topk_width = probes.empty() ? 0 : probes.front().topk;
    const size_t L = probes.size();
    const size_t K = static_cast<size_t>(r.indexer_topk_width);
    r.indexer_topk.assign(static_cast<size_t>(r.indexer_rows) * L * K, -1);
    for (size_t l = 0; l < L; ++l) {
      const IndexerProbe& p = probes[l];
      r.indexer_layers.push_back(p.layer);
      const size_t rows = std::min(p.positions.size(), static_cast<size_t>(r.indexer_rows));
      for (size_t s = 0; s < rows; ++s) {
        const int64_t pos = p.positions[s];
        if (pos < 0 || pos >= r.indexer_rows || p.topk_sets.size() < (s + 1) * K) continue;
        std::copy_n(
            p.topk_sets.begin() + static_cast<int64_t>(s * K), K,
            r.indexer_topk.begin() + static_cast<int64_t>((static_cast<size_t>(pos) * L + l) * K));
      }
    }
  }
  return r;
}

}  // namespace nw
