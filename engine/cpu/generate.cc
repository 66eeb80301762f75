#include "engine/cpu/generate.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "engine/cpu/sequence.h"

namespace nw::cpu {

namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Result<BackendOptions> CpuBackendOptions(std::string_view backend) {
  if (backend == "cpu") return BackendOptions{KvLayout::kContiguous, 0};
  if (backend == "cpu-paged") return BackendOptions{KvLayout::kPaged, kPagedPrefillChunk};
  return Status::InvalidArgument("unknown CPU backend '" + std::string(backend) +
                                 "' (expected cpu or cpu-paged)");
}

int32_t Argmax(const float* logits, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    const float v = logits[i];
    const float b = logits[best];
    if (v > b || (b != b && v == v)) best = static_cast<int32_t>(i);
  }
  return best;
}

Result<Sequence> SequenceForRequest(const ModelConfig& cfg, const ModelWeights& weights,
                                    const GenerateRequest& request, const BackendOptions& backend) {
  if (request.prompt.empty()) return Status::InvalidArgument("prompt is empty");
  if (request.max_new_tokens < 0) return Status::InvalidArgument("max_new_tokens is negative");
  if (request.index_topk < 0) return Status::InvalidArgument("index_topk is negative");
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.max_new_tokens;
  if (cfg.max_position_embeddings > 0 && total > cfg.max_position_embeddings) {
    return Status::OutOfRange("prompt (" + std::to_string(request.prompt.size()) +
                              ") + max_new_tokens (" + std::to_string(request.max_new_tokens) +
                              ") exceeds max_position_embeddings " +
                              std::to_string(cfg.max_position_embeddings));
  }
  SequenceOptions so;
  so.layout = backend.layout;
  so.prefill_chunk = backend.prefill_chunk;
  so.index_topk = request.index_topk;
  so.precision = request.precision;
  so.probe = request.probe;
  so.max_tokens = total;
  return Sequence::Create(cfg, weights, so);
}

Status DecodeGreedy(const ModelConfig& cfg, const GenerateRequest& request, Sequence* seq,
                    std::vector<float>* logits, GenerateResult* result) {
  const int64_t V = cfg.vocab_size;
  while (static_cast<int>(result->tokens.size()) < request.max_new_tokens) {
    const int32_t next = Argmax(logits->data(), V);
    result->tokens.push_back(next);
    if (std::find(request.stop_tokens.begin(), request.stop_tokens.end(), next) !=
        request.stop_tokens.end()) {
      result->stopped = true;
      break;
    }
    if (static_cast<int>(result->tokens.size()) == request.max_new_tokens) break;
    NW_RETURN_IF_ERROR(seq->Decode(next, logits));
  }
  return Status::Ok();
}

Result<GenerateResult> Generate(const ModelConfig& cfg, const ModelWeights& weights,
                                const GenerateRequest& request, const BackendOptions& backend) {
  NW_ASSIGN_OR_RETURN(Sequence seq, SequenceForRequest(cfg, weights, request, backend));

  GenerateResult result;
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  NW_RETURN_IF_ERROR(seq.Prefill(request.prompt, &logits));
  result.prefill_ms = MsSince(t0);
  const auto t1 = std::chrono::steady_clock::now();
  NW_RETURN_IF_ERROR(DecodeGreedy(cfg, request, &seq, &logits, &result));
  result.decode_ms = MsSince(t1);
  result.probes = seq.probes();
  return result;
}

}  // namespace nw::cpu
