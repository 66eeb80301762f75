#include "engine/backend.h"

#include <string>

namespace nw {

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
