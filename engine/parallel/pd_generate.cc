#include "engine/parallel/pd_generate.h"

#include <chrono>
#include <cstdint>
#include <vector>

#include "engine/cpu/generate.h"
#include "engine/cpu/sequence.h"
#include "engine/parallel/pd_transfer.h"

namespace nw::parallel {

namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

template <typename T>
void Append(std::vector<T>* to, const std::vector<T>& from) {
  to->insert(to->end(), from.begin(), from.end());
}

// Prefill rows of a layer followed by the decode instance's rows of the same layer.
Status MergeProbes(const std::vector<IndexerProbe>& decode, std::vector<IndexerProbe>* merged) {
  if (decode.size() != merged->size()) {
    return Status::Internal("PD transfer: the decode instance probes " +
                            std::to_string(decode.size()) + " layers, the prefill instance " +
                            std::to_string(merged->size()));
  }
  for (size_t i = 0; i < decode.size(); ++i) {
    IndexerProbe& p = (*merged)[i];
    const IndexerProbe& d = decode[i];
    if (p.layer != d.layer || p.topk != d.topk) {
      return Status::Internal("PD transfer: probe layers or top-k differ between instances");
    }
    Append(&p.positions, d.positions);
    Append(&p.needle_rank, d.needle_rank);
    Append(&p.in_topk, d.in_topk);
    Append(&p.num_visible, d.num_visible);
    Append(&p.needle_score, d.needle_score);
    Append(&p.kth_score, d.kth_score);
    Append(&p.topk_sets, d.topk_sets);
  }
  return Status::Ok();
}

}  // namespace

Result<GenerateResult> GeneratePd(const ModelConfig& cfg, const ModelWeights& weights,
                                  const GenerateRequest& request) {
  const cpu::BackendOptions prefill_side{KvLayout::kContiguous, 0};
  const cpu::BackendOptions decode_side{KvLayout::kPaged, cpu::kPagedPrefillChunk};
  GenerateResult result;
  std::vector<float> logits;
  std::vector<uint8_t> transfer;
  {
    NW_ASSIGN_OR_RETURN(cpu::Sequence prefill,
                        cpu::SequenceForRequest(cfg, weights, request, prefill_side));
    const auto t0 = std::chrono::steady_clock::now();
    NW_RETURN_IF_ERROR(prefill.Prefill(request.prompt, &logits));
    transfer = ExportTransfer(cfg, prefill);
    result.prefill_ms = MsSince(t0);
    result.probes = prefill.probes();
  }  // the prefill instance's caches are gone: the decode side has only the transfer buffer

  NW_ASSIGN_OR_RETURN(cpu::Sequence decode,
                      cpu::SequenceForRequest(cfg, weights, request, decode_side));
  const auto t1 = std::chrono::steady_clock::now();
  if (Status s = ImportTransfer(cfg, transfer, &decode); !s.ok()) {
    return s.WithContext("PD transfer");
  }
  NW_RETURN_IF_ERROR(cpu::DecodeGreedy(cfg, request, &decode, &logits, &result));
  result.decode_ms = MsSince(t1);
  NW_RETURN_IF_ERROR(MergeProbes(decode.probes(), &result.probes));
  return result;
}

}  // namespace nw::parallel
