// Precision profiles: which number format each part of the engine uses.
//
// A profile names a format for five parts: weights (requantized on load), activations, index q,
// index k and the KV cache. The CPU backend computes in fp32 and reproduces every format
// bit-exactly by fake quantization (kernels/quant). Thread-safety: values.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nw {

enum class NumFormat {
  kFp32,   // no rounding
  kBf16,   // round to nearest even to bfloat16
  kFp8,    // e4m3 with power-of-two (ue8m0) scales: per 1x128 for activations and index q/k,
           // 128x128 for weights; for the KV cache this is the V4 layout (448 e4m3 nope dims
           // with per-64 ue8m0 scales + 64 bf16 rope dims)
  kMxfp4,  // e2m1, per-32 ue8m0 scale
  kNvfp4,  // e2m1, per-16 e4m3 scale and an fp32 tensor scale
};

std::string_view NumFormatName(NumFormat f);  // "fp32", "bf16", "fp8", "mxfp4", "nvfp4"
Result<NumFormat> ParseNumFormat(std::string_view name);

struct PrecisionProfile {
  std::string name = "fp32";
  NumFormat weights = NumFormat::kFp32;      // fp32 | bf16 | fp8
  NumFormat activations = NumFormat::kFp32;  // fp32 | bf16
  NumFormat index_q = NumFormat::kFp32;      // fp32 | bf16 | fp8 | mxfp4 | nvfp4
  NumFormat index_k = NumFormat::kFp32;      // fp32 | bf16 | fp8 | mxfp4 | nvfp4
  NumFormat kv = NumFormat::kFp32;           // fp32 | bf16 | fp8 (V4 KV layout)

  /// {"name":..,"weights":"bf16",...}; keys sorted, stable across builds (part of job keys).
  nlohmann::json ToJson() const;
  static Result<PrecisionProfile> FromJson(const nlohmann::json& j);
  /// Rejects formats a part does not support (e.g. mxfp4 activations).
  Status Validate() const;
  friend bool operator==(const PrecisionProfile&, const PrecisionProfile&) = default;
};

/// The built-in profiles: fp32, bf16, fp8-index, mxfp4-index, nvfp4-index, fp8-kv.
Result<PrecisionProfile> NamedPrecisionProfile(std::string_view name);
std::vector<std::string> NamedPrecisionProfileNames();

}  // namespace nw
