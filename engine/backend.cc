#include "engine/backend.h"

#include <string>

namespace nw {

Status BackendSequence::Extend(std::span<const int32_t> tokens, std::vector<float>* all_logits) {
  all_logits->clear();
  std::vector<float> row;
  for (int32_t t : tokens) {
    NW_RETURN_IF_ERROR(Decode(t, &row));
    all_logits->insert(all_logits->end(), row.begin(), row.end());
  }
  return Status::Ok();
}

Status Backend::DecodeBatch(std::span<BackendSequence* const> seqs, std::span<const int32_t> tokens,
                            std::vector<float>* logits) {
  if (seqs.size() != tokens.size()) {
    return Status::InvalidArgument("decode batch has " + std::to_string(seqs.size()) +
                                   " sequences and " + std::to_string(tokens.size()) + " tokens");
  }
  logits->clear();
  std::vector<float> one;
  for (size_t i = 0; i < seqs.size(); ++i) {
    NW_RETURN_IF_ERROR(seqs[i]->Decode(tokens[i], &one));
    logits->insert(logits->end(), one.begin(), one.end());
  }
  return Status::Ok();
}

}  // namespace nw
