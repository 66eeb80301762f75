#include "engine/weight_cache.h"

#include <utility>

#include "engine/checkpoint/loader.h"

namespace nw {

WeightCache::WeightCache(std::shared_ptr<const ModelWeights> fp32) : fp32_(std::move(fp32)) {}

std::shared_ptr<const ModelWeights> WeightCache::Get(NumFormat format) {
  if (format == NumFormat::kFp32) return fp32_;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = copies_.find(format);
  if (it == copies_.end()) {
    it = copies_
             .emplace(format,
                      std::make_shared<const ModelWeights>(RequantizeWeights(*fp32_, format)))
             .first;
  }
  return it->second;
}

}  // namespace nw
