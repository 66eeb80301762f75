#include "http/serve_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "engine/checkpoint/loader.h"
#include "engine/checkpoint/model_files.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/cpu/generate.h"
#include "engine/cpu/sequence.h"
#include "engine/engine.h"

namespace nw {
namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

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
                    uint64_t* state) {
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
  while (keep < n && (keep == 0 || kept < top_p * total)) {
    kept += p[static_cast<size_t>(order[keep])];
    ++keep;
  }
  const double u = static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53 * kept;
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
  auto options = cpu::CpuBackendOptions(backend);
  if (!options.ok()) {
    return Status::Unsupported("nw serve runs the CPU backends (cpu, cpu-paged), not '" + backend +
                               "'");
  }
  NW_ASSIGN_OR_RETURN(LoadedModel loaded, LoadModelFolder(dir));
  NW_RETURN_IF_ERROR(loaded.config.Validate());
  NW_RETURN_IF_ERROR(
      cpu::ValidateWeights(loaded.config, loaded.weights).WithContext(loaded.files.dir.string()));
  auto m = std::make_unique<ServeModel>(Private{});
  m->config_ = std::move(loaded.config);
  m->tokenizer_ = std::move(loaded.tokenizer);
  m->weights_ = std::move(loaded.weights);
  m->digest_ = loaded.files.digest;
  m->backend_ = backend;
  m->layout_ = options->layout;
  m->prefill_chunk_ = options->prefill_chunk;
  return m;
}

const ModelWeights& ServeModel::WeightsFor(NumFormat format) {
  if (format == NumFormat::kFp32) return weights_;
  auto it = requantized_.find(format);
  if (it == requantized_.end()) {
    it = requantized_
             .emplace(format, std::make_unique<ModelWeights>(RequantizeWeights(weights_, format)))
             .first;
  }
  return *it->second;
}

Result<ServeResult> ServeModel::Generate(const ServeRequest& request) {
  if (request.prompt.empty()) return Status::InvalidArgument("the prompt is empty");
  if (request.max_tokens < 1) return Status::InvalidArgument("max_tokens must be >= 1");
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= config_.vocab_size) {
      return Status::InvalidArgument("prompt token id " + std::to_string(id) +
                                     " is outside the vocabulary [0, " +
                                     std::to_string(config_.vocab_size) + ")");
    }
  }
  if (request.index_topk < 0) return Status::InvalidArgument("index_topk must be >= 0");
  NW_RETURN_IF_ERROR(request.precision.Validate());
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
  if (config_.max_position_embeddings > 0 && total > config_.max_position_embeddings) {
    return Status::OutOfRange("the prompt (" + std::to_string(request.prompt.size()) +
                              " tokens) plus max_tokens (" + std::to_string(request.max_tokens) +
                              ") exceeds the model's context of " +
                              std::to_string(config_.max_position_embeddings) + " tokens");
  }
  std::vector<int32_t> stop_ids = request.stop_token_ids;
  if (!request.ignore_eos && config_.eos_token_id >= 0) stop_ids.push_back(config_.eos_token_id);

  cpu::SequenceOptions so;
  so.layout = layout_;
  so.prefill_chunk = prefill_chunk_;
  so.index_topk = request.index_topk;
  so.precision = request.precision;
  if (request.return_indexer_topk) {
    ProbeRequest probe;  // every position, no needle: only the top-k sets are wanted
    probe.keep_topk_sets = true;
    so.probe = probe;
  }
  so.max_tokens = total;
  NW_ASSIGN_OR_RETURN(cpu::Sequence seq,
                      cpu::Sequence::Create(config_, WeightsFor(request.precision.weights), so));

  ServeResult r;
  r.finish_reason = "length";
  std::vector<float> logits;
  uint64_t rng = request.seed;
  if (request.cancel != nullptr && request.cancel->load()) {
    return Status::Cancelled("the request was cancelled");
  }
  const auto t0 = std::chrono::steady_clock::now();
  NW_RETURN_IF_ERROR(seq.Prefill(request.prompt, &logits));
  r.prefill_ms = MsSince(t0);
  const auto t1 = std::chrono::steady_clock::now();
  const int64_t V = config_.vocab_size;
  while (static_cast<int>(r.tokens.size()) < request.max_tokens) {
    const int32_t next = request.temperature > 0
                             ? SampleToken(logits, request.temperature, request.top_p, &rng)
                             : cpu::Argmax(logits.data(), V);
    r.tokens.push_back(next);
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) {
      r.finish_reason = "stop";
      r.matched_stop = next;
      break;
    }
    if (!request.stop.empty()) {
      const std::string text = tokenizer_.Decode(r.tokens);
      if (FindStop(text, request.stop).first != std::string::npos) {
        r.finish_reason = "stop";
        break;
      }
    }
    if (static_cast<int>(r.tokens.size()) == request.max_tokens) break;
    if (request.cancel != nullptr && request.cancel->load()) {
      return Status::Cancelled("the request was cancelled");
    }
    NW_RETURN_IF_ERROR(seq.Decode(next, &logits));
  }
  r.decode_ms = MsSince(t1);

  std::vector<int32_t> text_tokens = r.tokens;
  if (r.matched_stop.is_number()) text_tokens.pop_back();
  r.text = tokenizer_.Decode(text_tokens);
  if (!request.stop.empty()) {
    auto [at, which] = FindStop(r.text, request.stop);
    if (at != std::string::npos) {
      r.text.resize(at);
      r.finish_reason = "stop";
      r.matched_stop = request.stop[which];
    }
  }

  if (request.return_indexer_topk) {
    // The model ran positions 0 .. prompt + generated - 2 (the last token is never fed back);
    // the probes hold one row per position run, in order.
    const std::vector<IndexerProbe>& probes = seq.probes();
    r.indexer_rows = static_cast<int64_t>(request.prompt.size() + r.tokens.size()) - 1;
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
