#include "engine/cpu/batch.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "engine/cpu/sequence_impl.h"

namespace nw::cpu {

namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Status DecodeBatch(std::span<Sequence* const> seqs, std::span<const int32_t> tokens,
                   std::vector<float>* logits) {
  if (seqs.size() != tokens.size()) {
    return Status::InvalidArgument("decode batch has " + std::to_string(seqs.size()) +
                                   " sequences and " + std::to_string(tokens.size()) + " tokens");
  }
  if (seqs.empty()) return Status::InvalidArgument("decode batch is empty");
  const ModelConfig& cfg = seqs.front()->impl().cfg;
  const int64_t V = cfg.vocab_size;
  // Check everything first, so that an error leaves every sequence where it was.
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Sequence::Impl& im = seqs[i]->impl();
    if (&im.cfg != &cfg) {
      return Status::InvalidArgument("sequences of a decode batch must share the config");
    }
    for (size_t j = 0; j < i; ++j) {
      if (seqs[j] == seqs[i]) return Status::InvalidArgument("a sequence appears twice");
    }
    if (im.pos + 1 > im.opts.max_tokens) {
      return Status::OutOfRange("sequence would reach " + std::to_string(im.pos + 1) +
                                " tokens, above its capacity of " +
                                std::to_string(im.opts.max_tokens));
    }
    if (tokens[i] < 0 || tokens[i] >= cfg.vocab_size) {
      return Status::InvalidArgument("token id " + std::to_string(tokens[i]) + " outside [0, " +
                                     std::to_string(cfg.vocab_size) + ")");
    }
  }
  logits->assign(seqs.size() * static_cast<size_t>(V), 0.0f);
  // Passes: one per set of weights (in order of first appearance); tp_ranks > 1 alone.
  std::vector<bool> done(seqs.size(), false);
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (done[i]) continue;
    Sequence::Impl& lead = seqs[i]->impl();
    std::vector<RowsPart> parts;
    for (size_t j = i; j < seqs.size(); ++j) {
      Sequence::Impl& im = seqs[j]->impl();
      const bool alone = lead.opts.tp_ranks > 1 || im.opts.tp_ranks > 1;
      if (done[j] || &im.w != &lead.w || (alone && j != i)) continue;
      parts.push_back(RowsPart{&im, tokens.subspan(j, 1), logits->data() + j * V, nullptr});
      done[j] = true;
    }
    NW_RETURN_IF_ERROR(ForwardRows(parts));
  }
  return Status::Ok();
}

Result<std::vector<GenerateResult>> GenerateBatch(const ModelConfig& cfg,
                                                  std::span<const ModelWeights* const> weights,
                                                  std::span<const GenerateRequest> requests,
                                                  const BackendOptions& backend) {
  if (weights.size() != requests.size()) {
    return Status::InvalidArgument("GenerateBatch needs one weights pointer per request");
  }
  const size_t B = requests.size();
  std::vector<Sequence> seqs;
  seqs.reserve(B);
  for (size_t i = 0; i < B; ++i) {
    auto seq = SequenceForRequest(cfg, *weights[i], requests[i], backend);
    if (!seq.ok()) return seq.status().WithContext("request " + std::to_string(i));
    seqs.push_back(*std::move(seq));
  }
  const int64_t V = cfg.vocab_size;
  std::vector<GenerateResult> results(B);
  std::vector<std::vector<float>> last(B);
  for (size_t i = 0; i < B; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    NW_RETURN_IF_ERROR(seqs[i].Prefill(requests[i].prompt, &last[i]));
    results[i].prefill_ms = MsSince(t0);
  }
  // Each step: every unfinished request takes its next token from its logits; those that go on
  // decode it together.
  std::vector<bool> finished(B, false);
  std::vector<float> logits;
  const auto t1 = std::chrono::steady_clock::now();
  for (;;) {
    std::vector<Sequence*> step;
    std::vector<int32_t> next;
    std::vector<size_t> who;
    for (size_t i = 0; i < B; ++i) {
      if (finished[i]) continue;
      const GenerateRequest& rq = requests[i];
      GenerateResult& r = results[i];
      if (static_cast<int>(r.tokens.size()) >= rq.max_new_tokens) {  // max_new_tokens == 0
        finished[i] = true;
        r.decode_ms = MsSince(t1);
        continue;
      }
      const int32_t tok = Argmax(last[i].data(), V);
      r.tokens.push_back(tok);
      const bool stop =
          std::find(rq.stop_tokens.begin(), rq.stop_tokens.end(), tok) != rq.stop_tokens.end();
      if (stop || static_cast<int>(r.tokens.size()) == rq.max_new_tokens) {
        r.stopped = stop;
        finished[i] = true;
        r.decode_ms = MsSince(t1);
        continue;
      }
      step.push_back(&seqs[i]);
      next.push_back(tok);
      who.push_back(i);
    }
    if (step.empty()) break;
    NW_RETURN_IF_ERROR(DecodeBatch(step, next, &logits));
    for (size_t k = 0; k < who.size(); ++k) {
      last[who[k]].assign(logits.begin() + static_cast<int64_t>(k) * V,
                          logits.begin() + static_cast<int64_t>(k + 1) * V);
    }
  }
  for (size_t i = 0; i < B; ++i) results[i].probes = seqs[i].probes();
  return results;
}

}  // namespace nw::cpu
