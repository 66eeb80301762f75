#include "engine/checkpoint/random_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>
#include <utility>

#include "common/splitmix64.h"
#include "engine/checkpoint/json_util.h"
#include "engine/checkpoint/tensor.h"
#include "engine/checkpoint/tensor_specs.h"
#include "kernels/quant/quant.h"

namespace nw {
namespace {

constexpr uint64_t kGamma = kSplitMix64Gamma;

uint64_t Fnv1a64(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

// SplitMix64 as a counter-based stream: value i = Mix64(key + (i + 1) * gamma).
class CounterRng {
 public:
  CounterRng(uint64_t seed, const std::string& name) : key_(Mix64(seed + kGamma) ^ Fnv1a64(name)) {}

  uint64_t Next() { return Mix64(key_ + (++counter_) * kGamma); }
  // Uniform in (0, 1): never 0, so log() is finite.
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53; }
  double Normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = Uniform(), u2 = Uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double t = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(t);
    has_spare_ = true;
    return r * std::cos(t);
  }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
  bool has_spare_ = false;
  double spare_ = 0;
};

std::vector<float> DrawValues(const ModelConfig& cfg, uint64_t seed, const TensorSpec& s) {
  const size_t n = static_cast<size_t>(Tensor::Numel(s.shape));
  std::vector<float> v(n, 0.0f);
  CounterRng rng(seed, s.name);
  switch (s.init) {
    case TensorInit::kFanIn:
    case TensorInit::kHcFn:
    case TensorInit::kSmall: {
      double std_dev = 0.02;
      if (s.init != TensorInit::kSmall) {
        std_dev = 1.0 / std::sqrt(static_cast<double>(s.shape.at(1)));
        if (s.init == TensorInit::kHcFn) std_dev *= 0.1;
      }
      for (float& x : v) x = static_cast<float>(rng.Normal() * std_dev);
      break;
    }
    case TensorInit::kOnes:
      std::fill(v.begin(), v.end(), 1.0f);
      break;
    case TensorInit::kZeros:
      break;
    case TensorInit::kHcBase: {
      const int64_t hc = cfg.hc_mult;
      const float pre = hc > 1 ? static_cast<float>(-std::log(static_cast<double>(hc - 1))) : 4.0f;
      if (static_cast<int64_t>(n) == hc) {  // head: pre only
        std::fill(v.begin(), v.end(), pre);
        break;
      }
      for (int64_t i = 0; i < hc; ++i) v[static_cast<size_t>(i)] = pre;  // pre
      // post stays 0; comb (row-major n x n after pre and post) gets 4 on the diagonal.
      for (int64_t i = 0; i < hc; ++i) v[static_cast<size_t>(2 * hc + i * hc + i)] = 4.0f;
      break;
    }
    case TensorInit::kTid2eid: {
      const int64_t rows = s.shape[0], k = s.shape[1], e = cfg.n_routed_experts;
      std::vector<int64_t> perm(static_cast<size_t>(e));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < e; ++i) perm[static_cast<size_t>(i)] = i;
        for (int64_t i = 0; i < k; ++i) {  // partial Fisher-Yates
          const int64_t j = i + static_cast<int64_t>(rng.Next() % static_cast<uint64_t>(e - i));
          std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
          v[static_cast<size_t>(r * k + i)] = static_cast<float>(perm[static_cast<size_t>(i)]);
        }
      }
      break;
    }
  }
  return v;
}

std::vector<uint8_t> EncodeBf16(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t b = quant::FloatToBf16Bits(v[i]);
    std::memcpy(out.data() + 2 * i, &b, 2);
  }
  return out;
}

std::vector<uint8_t> EncodeF32(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<uint8_t> EncodeI64(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 8);
  for (size_t i = 0; i < v.size(); ++i) {
    const auto x = static_cast<int64_t>(v[i]);
    std::memcpy(out.data() + 8 * i, &x, 8);
  }
  return out;
}

const TensorSpec* FindSpec(const std::vector<TensorSpec>& specs, const std::string& name) {
  for (const TensorSpec& s : specs) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

}  // namespace

Result<std::vector<float>> RandomTensorValues(const ModelConfig& cfg, uint64_t seed,
                                              const std::string& name) {
  NW_RETURN_IF_ERROR(cfg.Validate());
  const std::vector<TensorSpec> specs = CheckpointTensorSpecs(cfg);
  const TensorSpec* s = FindSpec(specs, name);
  if (!s) return Status::NotFound("random checkpoint: no planned tensor '" + name + "'");
  return DrawValues(cfg, seed, *s);
}

Result<std::vector<StWriteTensor>> RandomCheckpointTensors(const ModelConfig& cfg, uint64_t seed,
                                                           CheckpointLayout layout) {
  NW_RETURN_IF_ERROR(cfg.Validate());
  if (layout == CheckpointLayout::kFp8Fp4 && (cfg.dim % 32 != 0 || cfg.moe_inter_dim % 32 != 0)) {
    return Status::InvalidArgument(
        "random checkpoint: the FP8+FP4 layout needs dim and moe_inter_dim divisible by 32 (FP4 "
        "experts), got " +
        std::to_string(cfg.dim) + " and " + std::to_string(cfg.moe_inter_dim));
  }
  std::vector<StWriteTensor> out;
  for (const TensorSpec& s : CheckpointTensorSpecs(cfg)) {
    std::vector<float> v = DrawValues(cfg, seed, s);
    StWriteTensor t;
    t.name = s.name;
    t.shape = s.shape;
    const bool quantized = layout == CheckpointLayout::kFp8Fp4 && IsLinearKind(s.kind);
    if (s.kind == TensorKind::kTid2eid) {
      t.dtype = StDtype::kI64;
      t.data = EncodeI64(v);
    } else if (s.kind == TensorKind::kF32) {
      t.dtype = StDtype::kF32;
      t.data = EncodeF32(v);
    } else if (!quantized) {
      t.dtype = StDtype::kBF16;
      t.data = EncodeBf16(v);
    } else {
      const int64_t rows = s.shape[0], cols = s.shape[1];
      StWriteTensor scale;
      scale.name = ScaleName(s.name);
      scale.dtype = StDtype::kF8E8M0;
      if (s.kind == TensorKind::kExpertLinear) {
        t.dtype = StDtype::kI8;
        t.shape = {rows, cols / 2};
        t.data.resize(static_cast<size_t>(rows * cols / 2));
        scale.shape = {rows, cols / 32};
        scale.data.resize(static_cast<size_t>(rows * (cols / 32)));
        quant::QuantizeFp4Weight(v.data(), rows, cols, t.data.data(), scale.data.data());
      } else {
        t.dtype = StDtype::kF8E4M3;
        t.data.resize(static_cast<size_t>(rows * cols));
        scale.shape = {(rows + 127) / 128, (cols + 127) / 128};
        scale.data.resize(static_cast<size_t>(scale.shape[0] * scale.shape[1]));
        quant::QuantizeFp8Weight(v.data(), rows, cols, t.data.data(), scale.data.data());
      }
      out.push_back(std::move(t));
      out.push_back(std::move(scale));
      continue;
    }
    out.push_back(std::move(t));
  }
  return out;
}

nlohmann::json RandomCheckpointConfigJson(const ModelConfig& cfg, CheckpointLayout layout) {
  nlohmann::json j = cfg.ToHfJson();
  if (layout == CheckpointLayout::kFp8Fp4) {
    j["quantization_config"] = {{"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"},
                                {"quant_method", "fp8"},
                                {"scale_fmt", "ue8m0"},
                                {"weight_block_size", {128, 128}}};
    j["expert_dtype"] = "fp4";
  }
  return j;
}

Status WriteRandomCheckpoint(const ModelConfig& cfg, uint64_t seed, CheckpointLayout layout,
                             const std::filesystem::path& dir, int64_t max_shard_bytes) {
  NW_ASSIGN_OR_RETURN(std::vector<StWriteTensor> tensors,
                      RandomCheckpointTensors(cfg, seed, layout));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError(dir.string() + ": cannot create folder: " + ec.message());
  NW_RETURN_IF_ERROR(WriteFileAtomically(dir / "config.json",
                                         RandomCheckpointConfigJson(cfg, layout).dump(2) + "\n"));
  Result<std::vector<std::filesystem::path>> written =
      WriteSafetensorsModel(dir, tensors, max_shard_bytes);
  return written.status();
}

Result<ModelConfig> ReduceConfig(ModelConfig cfg, const ConfigReduction& r) {
  auto bad = [](const std::string& what) {
    return Status::InvalidArgument("config reduction: " + what);
  };
  const std::vector<int> main_ratios(cfg.compress_ratios.begin(),
                                     cfg.compress_ratios.begin() + cfg.n_layers);
  const std::vector<int> mtp_ratios(cfg.compress_ratios.begin() + cfg.n_layers,
                                    cfg.compress_ratios.end());
  int layers = cfg.n_layers;
  if (r.layers != 0) {
    if (r.layers < 1 || r.layers > cfg.n_layers) {
      return bad("layers must be in [1, " + std::to_string(cfg.n_layers) + "], got " +
                 std::to_string(r.layers));
    }
    layers = r.layers;
  }
  int mtp = cfg.n_mtp_layers;
  if (r.mtp_layers >= 0) {
    if (r.mtp_layers > cfg.n_mtp_layers) {
      return bad("mtp_layers must be in [0, " + std::to_string(cfg.n_mtp_layers) + "], got " +
                 std::to_string(r.mtp_layers));
    }
    mtp = r.mtp_layers;
  }
  cfg.n_layers = layers;
  cfg.n_mtp_layers = mtp;
  cfg.compress_ratios.assign(main_ratios.begin(), main_ratios.begin() + layers);
  cfg.compress_ratios.insert(cfg.compress_ratios.end(), mtp_ratios.begin(),
                             mtp_ratios.begin() + mtp);
  cfg.n_hash_layers = std::min(cfg.n_hash_layers, layers - 1);
  if (r.vocab_size != 0) {
    if (r.vocab_size < 1 || r.vocab_size > cfg.vocab_size) {
      return bad("vocab_size must be in [1, " + std::to_string(cfg.vocab_size) + "], got " +
                 std::to_string(r.vocab_size));
    }
    cfg.vocab_size = r.vocab_size;
    if (cfg.bos_token_id >= cfg.vocab_size) cfg.bos_token_id = -1;
    if (cfg.eos_token_id >= cfg.vocab_size) cfg.eos_token_id = -1;
  }
  if (r.routed_experts != 0) {
    if (r.routed_experts < cfg.n_activated_experts || r.routed_experts > cfg.n_routed_experts) {
      return bad("routed_experts must be in [n_activated_experts=" +
                 std::to_string(cfg.n_activated_experts) + ", " +
                 std::to_string(cfg.n_routed_experts) + "], got " +
                 std::to_string(r.routed_experts));
    }
    cfg.n_routed_experts = r.routed_experts;
  }
  NW_RETURN_IF_ERROR(cfg.Validate());
  return cfg;
}

}  // namespace nw
