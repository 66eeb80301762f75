#include "engine/parallel/tp_sim.h"

#include <string>

namespace nw::parallel {

Result<cpu::Sequence> CreateTpSequence(const ModelConfig& cfg, const ModelWeights& weights,
                                       cpu::SequenceOptions options, const PartitionPlan& plan) {
  NW_RETURN_IF_ERROR(ValidatePartitionPlan(cfg, plan));
  options.tp_ranks = plan.ranks;
  return cpu::Sequence::Create(cfg, weights, options);
}

Status AllReduceSum(std::span<const std::vector<float>> partials, std::vector<float>* out) {
  if (partials.empty()) return Status::InvalidArgument("all-reduce over no ranks");
  const size_t n = partials[0].size();
  for (size_t r = 0; r < partials.size(); ++r) {
    if (partials[r].size() != n) {
      return Status::InvalidArgument("rank " + std::to_string(r) + " partial has " +
                                     std::to_string(partials[r].size()) + " values, expected " +
                                     std::to_string(n));
    }
  }
  out->assign(partials[0].begin(), partials[0].end());
  for (size_t r = 1; r < partials.size(); ++r) {
    for (size_t i = 0; i < n; ++i) (*out)[i] += partials[r][i];
  }
  return Status::Ok();
}

}  // namespace nw::parallel
