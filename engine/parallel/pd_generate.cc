#include "engine/parallel/pd_generate.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/stopwatch.h"
#include "engine/backend_catalog.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/generate.h"
#include "engine/parallel/pd_transfer.h"

namespace nw::parallel {

namespace {

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
    Append(&p.next_score, d.next_score);
    Append(&p.topk_sets, d.topk_sets);
  }
  return Status::Ok();
}

// The transfer buffer of `seq`, with a handoff fault applied to it (engine/parallel/pd_transfer.h).
std::vector<uint8_t> TransferWithFault(const ModelConfig& cfg, const cpu::Sequence& seq,
                                       Fault fault) {
  cpu::SequenceState st = seq.ExportState();
  ApplyHandoffFault(fault, &st);
  return SerializeDecodeState(cfg, st);
}

// The catalog entries whose layouts the two instances use.
const BackendInfo& Entry(const char* name) { return *FindBackend(name); }

}  // namespace

Result<std::unique_ptr<PdSequence>> PdSequence::Create(std::shared_ptr<const ModelConfig> config,
                                                       std::shared_ptr<const ModelWeights> weights,
                                                       const SequenceSpec& spec) {
  std::unique_ptr<PdSequence> s(new PdSequence());
  s->config_ = std::move(config);
  s->weights_ = std::move(weights);
  s->decode_options_ = cpu::SequenceOptionsFor(Entry("cpu-paged"), spec);
  s->fault_ = spec.fault;
  NW_ASSIGN_OR_RETURN(cpu::Sequence prefill,
                      cpu::Sequence::Create(*s->config_, *s->weights_,
                                            cpu::SequenceOptionsFor(Entry("cpu"), spec)));
  s->topk_ = prefill.index_topk();
  s->prefill_.emplace(std::move(prefill));
  return s;
}

int64_t PdSequence::position() const {
  if (prefill_) return prefill_->position();
  if (decode_) return decode_->position();
  return position_;
}

Status PdSequence::Prefill(std::span<const int32_t> tokens, std::vector<float>* logits) {
  if (prefill_) return prefill_->Prefill(tokens, logits);
  NW_RETURN_IF_ERROR(Import());
  return decode_->Prefill(tokens, logits);
}

Status PdSequence::Decode(int32_t token, std::vector<float>* logits) {
  NW_RETURN_IF_ERROR(Import());
  return decode_->Decode(token, logits);
}

Status PdSequence::Export() {
  if (!prefill_) return Status::Ok();
  transfer_ = TransferWithFault(*config_, *prefill_, fault_);
  position_ = prefill_->position();
  prefill_probes_ = prefill_->probes();
  prefill_.reset();  // the prefill instance's caches are gone: only the transfer buffer is left
  return Status::Ok();
}

Status PdSequence::Import() {
  if (decode_) return Status::Ok();
  NW_RETURN_IF_ERROR(Export());
  NW_ASSIGN_OR_RETURN(cpu::Sequence decode,
                      cpu::Sequence::Create(*config_, *weights_, decode_options_));
  if (Status s = ImportTransfer(*config_, transfer_, &decode); !s.ok()) {
    return s.WithContext("PD transfer");
  }
  decode_.emplace(std::move(decode));
  transfer_.clear();
  transfer_.shrink_to_fit();
  return Status::Ok();
}

const std::vector<IndexerProbe>& PdSequence::probes() const {
  if (prefill_) return prefill_->probes();
  merged_ = prefill_probes_;
  if (decode_ && !MergeProbes(decode_->probes(), &merged_).ok()) merged_ = prefill_probes_;
  return merged_;
}

int64_t PdSequence::state_bytes() const {
  if (prefill_) return prefill_->state_bytes();
  if (decode_) return decode_->state_bytes();
  return static_cast<int64_t>(transfer_.size());
}

Result<GenerateResult> GeneratePd(std::shared_ptr<const ModelConfig> config,
                                  std::shared_ptr<const ModelWeights> weights,
                                  const GenerateRequest& request) {
  const ModelConfig& cfg = *config;
  NW_ASSIGN_OR_RETURN(SequenceSpec spec, CheckRequest(cfg, request));
  NW_ASSIGN_OR_RETURN(std::unique_ptr<PdSequence> seq,
                      PdSequence::Create(std::move(config), std::move(weights), spec));
  GenerateResult result;
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  NW_RETURN_IF_ERROR(seq->Prefill(request.prompt, &logits));
  NW_RETURN_IF_ERROR(seq->Export());
  result.prefill_ms = MsSince(t0);

  const auto t1 = std::chrono::steady_clock::now();
  NW_RETURN_IF_ERROR(seq->Import());
  NW_RETURN_IF_ERROR(DecodeGreedy(cfg, request, seq.get(), &logits, &result));
  result.decode_ms = MsSince(t1);
  result.probes = seq->probes();
  return result;
}

}  // namespace nw::parallel
