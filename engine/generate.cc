#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "common/stopwatch.h"

namespace nw {

namespace {

bool IsStop(const GenerateRequest& request, int32_t token) {
  return std::find(request.stop_tokens.begin(), request.stop_tokens.end(), token) !=
         request.stop_tokens.end();
}

// The draft tokens greedy decoding may feed back: the draft up to its first stop token (greedy
// feeds no stop token) and at most max_new_tokens - 1 tokens (greedy feeds a token only when
// another may follow it).
size_t FeedableDraft(const GenerateRequest& request) {
  size_t k = 0;
  const size_t cap = static_cast<size_t>(std::max(request.max_new_tokens - 1, 0));
  while (k < request.draft.size() && k < cap && !IsStop(request, request.draft[k])) ++k;
  return k;
}

enum class DraftOutcome {
  kUnused,    // the first greedy token is not the draft's: nothing fed, decode as usual
  kTaken,     // greedy's tokens up to where it leaves the draft (or all of it) are taken:
              // tokens and logits continue from there
  kDiverged,  // greedy leaves the draft inside the fed chunk and the sequence cannot rewind:
              // it holds extra tokens
};

// Greedy drafts: from the last prompt token's `logits`, if the first greedy token is the draft's,
// feeds the feedable draft as one chunk (BackendSequence::Extend) and checks each row's argmax
// against the next draft token. All agree: result->tokens gets the draft and `logits` the last
// row, exactly the tokens and state greedy decoding would have after feeding those tokens one by
// one (Extend equals Decode bit for bit). Greedy leaves the draft after i + 1 tokens: a sequence
// that can rewind goes back to the prompt's end and feeds those i + 1 tokens again (the same
// bits), so decoding goes on from where greedy left the draft.
Result<DraftOutcome> TryDraft(const ModelConfig& cfg, const GenerateRequest& request,
                              BackendSequence* seq, std::vector<float>* logits,
                              GenerateResult* result) {
  const size_t k = FeedableDraft(request);
  const int64_t V = cfg.vocab_size;
  if (k == 0) return DraftOutcome::kUnused;
  NW_RETURN_IF_ERROR(CheckLogitsFinite(logits->data(), V, 0));
  if (Argmax(logits->data(), V) != request.draft[0]) return DraftOutcome::kUnused;
  const bool marked = seq->Checkpoint().ok();
  std::span<const int32_t> fed(request.draft.data(), k);
  std::vector<float> rows;
  NW_RETURN_IF_ERROR(seq->Extend(fed, &rows));
  for (size_t i = 0; i + 1 < k; ++i) {
    const float* row = rows.data() + static_cast<int64_t>(i) * V;
    NW_RETURN_IF_ERROR(CheckLogitsFinite(row, V, i + 1));
    if (Argmax(row, V) == request.draft[i + 1]) continue;
    if (!marked) return DraftOutcome::kDiverged;
    NW_RETURN_IF_ERROR(seq->Rewind());
    fed = fed.first(i + 1);
    NW_RETURN_IF_ERROR(seq->Extend(fed, &rows));
    break;
  }
  result->tokens.assign(fed.begin(), fed.end());
  logits->assign(rows.end() - V, rows.end());
  return DraftOutcome::kTaken;
}

}  // namespace

int32_t Argmax(const float* logits, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    const float v = logits[i];
    const float b = logits[best];
    if (v > b || (b != b && v == v)) best = static_cast<int32_t>(i);
  }
  return best;
}

Status CheckLogitsFinite(const float* logits, int64_t n, size_t step) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(logits[i])) {
      return Status::Internal("the model produced a non-finite logit (" +
                              std::string(std::isnan(logits[i]) ? "NaN" : "infinity") +
                              ") for token " + std::to_string(i) + " at generated token " +
                              std::to_string(step) +
                              ": the answer would mean nothing (bad weights or an overflow)");
    }
  }
  return Status::Ok();
}

Result<SequenceSpec> CheckRequest(const ModelConfig& cfg, const GenerateRequest& request) {
  if (request.prompt.empty()) return Status::InvalidArgument("prompt is empty");
  if (request.max_new_tokens < 0) return Status::InvalidArgument("max_new_tokens is negative");
  if (request.index_topk < 0) return Status::InvalidArgument("index_topk is negative");
  NW_RETURN_IF_ERROR(request.precision.Validate());
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.max_new_tokens;
  if (cfg.max_position_embeddings > 0 && total > cfg.max_position_embeddings) {
    return Status::OutOfRange("prompt (" + std::to_string(request.prompt.size()) +
                              ") + max_new_tokens (" + std::to_string(request.max_new_tokens) +
                              ") exceeds max_position_embeddings " +
                              std::to_string(cfg.max_position_embeddings));
  }
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= cfg.vocab_size) {
      return Status::InvalidArgument("prompt token id " + std::to_string(id) + " outside [0, " +
                                     std::to_string(cfg.vocab_size) + ")");
    }
  }
  for (int32_t id : request.draft) {
    if (id < 0 || id >= cfg.vocab_size) {
      return Status::InvalidArgument("draft token id " + std::to_string(id) + " outside [0, " +
                                     std::to_string(cfg.vocab_size) + ")");
    }
  }
  SequenceSpec spec;
  spec.max_tokens = total;
  spec.index_topk = request.index_topk;
  spec.precision = request.precision;
  spec.probe = request.probe;
  spec.fault = request.fault;
  spec.trace = request.trace;
  spec.memory_limit_bytes = request.memory_limit_bytes;
  return spec;
}

Status DecodeGreedy(const ModelConfig& cfg, const GenerateRequest& request, BackendSequence* seq,
                    std::vector<float>* logits, GenerateResult* result) {
  const int64_t V = cfg.vocab_size;
  while (static_cast<int>(result->tokens.size()) < request.max_new_tokens) {
    NW_RETURN_IF_ERROR(CheckLogitsFinite(logits->data(), V, result->tokens.size()));
    const int32_t next = Argmax(logits->data(), V);
    result->tokens.push_back(next);
    if (IsStop(request, next)) {
      result->stopped = true;
      break;
    }
    if (static_cast<int>(result->tokens.size()) == request.max_new_tokens) break;
    NW_RETURN_IF_ERROR(seq->Decode(next, logits));
  }
  return Status::Ok();
}

Result<GenerateResult> Generate(Backend& backend, const GenerateRequest& request) {
  NW_ASSIGN_OR_RETURN(SequenceSpec spec, CheckRequest(backend.config(), request));
  NW_RETURN_IF_ERROR(CheckBackendFault(backend.info(), request.fault));
  NW_RETURN_IF_ERROR(CheckBackendTrace(backend.info(), request.trace != nullptr));
  if (auto whole = backend.GenerateWhole(request)) return std::move(*whole);
  NW_ASSIGN_OR_RETURN(std::unique_ptr<BackendSequence> seq, backend.NewSequence(spec));
  GenerateResult result;
  std::vector<float> logits;
  auto t0 = std::chrono::steady_clock::now();
  NW_RETURN_IF_ERROR(seq->Prefill(request.prompt, &logits));
  result.prefill_ms = MsSince(t0);
  auto t1 = std::chrono::steady_clock::now();
  double draft_ms = 0;  // a diverged draft's check (the decode time of the first run)
  // A draft is tried on the clean engine only: a fault may act on multi-token chunks (the ragged
  // ones do), where a chunk is not the same as single steps; a trace records steps as they run.
  if (!request.draft.empty() && request.fault == Fault::kNone && request.trace == nullptr) {
    NW_ASSIGN_OR_RETURN(DraftOutcome outcome,
                        TryDraft(backend.config(), request, seq.get(), &logits, &result));
    if (outcome == DraftOutcome::kDiverged) {
      // The sequence went past where greedy leaves the draft: run the request again without
      // it. Both prefills count as prefill time, the draft check as decode time.
      draft_ms = MsSince(t1);
      NW_ASSIGN_OR_RETURN(seq, backend.NewSequence(spec));
      result.tokens.clear();
      t0 = std::chrono::steady_clock::now();
      NW_RETURN_IF_ERROR(seq->Prefill(request.prompt, &logits));
      result.prefill_ms += MsSince(t0);
      t1 = std::chrono::steady_clock::now();
    }
  }
  NW_RETURN_IF_ERROR(DecodeGreedy(backend.config(), request, seq.get(), &logits, &result));
  result.decode_ms = draft_ms + MsSince(t1);
  result.probes = seq->probes();
  return result;
}

Result<std::vector<GenerateResult>> GenerateBatch(Backend& backend,
                                                  std::span<const GenerateRequest> requests) {
  const ModelConfig& cfg = backend.config();
  const size_t B = requests.size();
  std::vector<SequenceSpec> specs;
  for (size_t i = 0; i < B; ++i) {
    auto spec = CheckRequest(cfg, requests[i]);
    if (!spec.ok()) return spec.status().WithContext("request " + std::to_string(i));
    if (Status s = CheckBackendFault(backend.info(), requests[i].fault); !s.ok()) {
      return s.WithContext("request " + std::to_string(i));
    }
    if (Status s = CheckBackendTrace(backend.info(), requests[i].trace != nullptr); !s.ok()) {
      return s.WithContext("request " + std::to_string(i));
    }
    specs.push_back(*std::move(spec));
  }
  std::vector<GenerateResult> results;
  if (B == 0) return results;
  // A backend that runs requests whole (cpu-pd) has no sequences to batch: one by one.
  if (auto whole = backend.GenerateWhole(requests[0])) {
    if (!whole->ok()) return whole->status().WithContext("request 0");
    results.push_back(*std::move(*whole));
    for (size_t i = 1; i < B; ++i) {
      auto one = Generate(backend, requests[i]);
      if (!one.ok()) return one.status().WithContext("request " + std::to_string(i));
      results.push_back(*std::move(one));
    }
    return results;
  }
  std::vector<std::unique_ptr<BackendSequence>> seqs;
  seqs.reserve(B);
  for (size_t i = 0; i < B; ++i) {
    auto seq = backend.NewSequence(specs[i]);
    if (!seq.ok()) return seq.status().WithContext("request " + std::to_string(i));
    seqs.push_back(*std::move(seq));
  }
  const int64_t V = cfg.vocab_size;
  results.resize(B);
  std::vector<std::vector<float>> last(B);
  for (size_t i = 0; i < B; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    NW_RETURN_IF_ERROR(seqs[i]->Prefill(requests[i].prompt, &last[i]));
    results[i].prefill_ms = MsSince(t0);
  }
  // Each step: every unfinished request takes its next token from its logits; those that go on
  // decode it together.
  std::vector<bool> finished(B, false);
  std::vector<float> logits;
  const auto t1 = std::chrono::steady_clock::now();
  for (;;) {
    std::vector<BackendSequence*> step;
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
      NW_RETURN_IF_ERROR(CheckLogitsFinite(last[i].data(), V, r.tokens.size()));
      const int32_t tok = Argmax(last[i].data(), V);
      r.tokens.push_back(tok);
      const bool stop = IsStop(rq, tok);
      if (stop || static_cast<int>(r.tokens.size()) == rq.max_new_tokens) {
        r.stopped = stop;
        finished[i] = true;
        r.decode_ms = MsSince(t1);
        continue;
      }
      step.push_back(seqs[i].get());
      next.push_back(tok);
      who.push_back(i);
    }
    if (step.empty()) break;
    NW_RETURN_IF_ERROR(backend.DecodeBatch(step, next, &logits));
    for (size_t k = 0; k < who.size(); ++k) {
      last[who[k]].assign(logits.begin() + static_cast<int64_t>(k) * V,
                          logits.begin() + static_cast<int64_t>(k + 1) * V);
    }
  }
  for (size_t i = 0; i < B; ++i) results[i].probes = seqs[i]->probes();
  return results;
}

}  // namespace nw
