#include "engine/cpu/batch.h"

#include <algorithm>
#include <string>

#include "engine/cpu/sequence_impl.h"

namespace nw::cpu {

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

}  // namespace nw::cpu
