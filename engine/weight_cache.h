// WeightCache: a model's fp32 weights as loaded, plus one requantized copy per weight format a
// request has asked for (RequantizeWeights, made on first use, then reused). Every backend holds
// one, so a campaign sweeping precision.weights requantizes each format once per loaded model.
// Thread-safety: Get is safe to call from several threads (a mutex guards the cache); the
// returned weights are immutable.
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "engine/checkpoint/weights.h"
#include "engine/precision.h"

namespace nw {

class WeightCache {
 public:
  explicit WeightCache(std::shared_ptr<const ModelWeights> fp32);

  /// The weights in `format` (kFp32: the loaded ones). A copy stays valid while the cache or any
  /// holder of the pointer lives.
  std::shared_ptr<const ModelWeights> Get(NumFormat format);
  /// The fp32 weights as loaded.
  const std::shared_ptr<const ModelWeights>& fp32() const { return fp32_; }

 private:
  std::shared_ptr<const ModelWeights> fp32_;
  std::mutex mu_;
  std::map<NumFormat, std::shared_ptr<const ModelWeights>> copies_;
};

}  // namespace nw
