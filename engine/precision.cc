#include "engine/precision.h"

#include <nlohmann/json.hpp>

namespace nw {

std::string_view NumFormatName(NumFormat f) {
  switch (f) {
    case NumFormat::kFp32:
      return "fp32";
    case NumFormat::kBf16:
      return "bf16";
    case NumFormat::kFp8:
      return "fp8";
    case NumFormat::kMxfp4:
      return "mxfp4";
    case NumFormat::kNvfp4:
      return "nvfp4";
  }
  return "unknown";
}

Result<NumFormat> ParseNumFormat(std::string_view name) {
  for (NumFormat f : {NumFormat::kFp32, NumFormat::kBf16, NumFormat::kFp8, NumFormat::kMxfp4,
                      NumFormat::kNvfp4}) {
    if (NumFormatName(f) == name) return f;
  }
  return Status::InvalidArgument("unknown number format '" + std::string(name) +
                                 "' (expected fp32, bf16, fp8, mxfp4 or nvfp4)");
}

nlohmann::json PrecisionProfile::ToJson() const {
  return nlohmann::json{{"name", name},
                        {"weights", NumFormatName(weights)},
                        {"activations", NumFormatName(activations)},
                        {"index_q", NumFormatName(index_q)},
                        {"index_k", NumFormatName(index_k)},
                        {"kv", NumFormatName(kv)}};
}

Result<PrecisionProfile> PrecisionProfile::FromJson(const nlohmann::json& j) {
  if (!j.is_object()) return Status::InvalidArgument("precision profile must be an object");
  PrecisionProfile p;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) {
      return Status::InvalidArgument("precision field '" + key + "' must be a string");
    }
    const std::string v = value.get<std::string>();
    if (key == "name") {
      p.name = v;
      continue;
    }
    NumFormat* slot = nullptr;
    if (key == "weights") slot = &p.weights;
    if (key == "activations") slot = &p.activations;
    if (key == "index_q") slot = &p.index_q;
    if (key == "index_k") slot = &p.index_k;
    if (key == "kv") slot = &p.kv;
    if (slot == nullptr) {
      return Status::InvalidArgument("unknown precision field '" + key +
                                     "' (expected weights, activations, index_q, index_k, kv)");
    }
    auto f = ParseNumFormat(v);
    if (!f.ok()) return f.status().WithContext("precision field '" + key + "'");
    *slot = *f;
  }
  NW_RETURN_IF_ERROR(p.Validate());
  return p;
}

Status PrecisionProfile::Validate() const {
  auto check = [](std::string_view part, NumFormat f, std::initializer_list<NumFormat> allowed) {
    for (NumFormat a : allowed) {
      if (a == f) return Status::Ok();
    }
    return Status::InvalidArgument("precision part '" + std::string(part) + "' cannot be " +
                                   std::string(NumFormatName(f)));
  };
  using F = NumFormat;
  NW_RETURN_IF_ERROR(check("weights", weights, {F::kFp32, F::kBf16, F::kFp8}));
  NW_RETURN_IF_ERROR(check("activations", activations, {F::kFp32, F::kBf16}));
  NW_RETURN_IF_ERROR(
      check("index_q", index_q, {F::kFp32, F::kBf16, F::kFp8, F::kMxfp4, F::kNvfp4}));
  NW_RETURN_IF_ERROR(
      check("index_k", index_k, {F::kFp32, F::kBf16, F::kFp8, F::kMxfp4, F::kNvfp4}));
  NW_RETURN_IF_ERROR(check("kv", kv, {F::kFp32, F::kBf16, F::kFp8}));
  return Status::Ok();
}

std::vector<std::string> NamedPrecisionProfileNames() {
  return {"fp32", "bf16", "fp8-index", "mxfp4-index", "nvfp4-index", "fp8-kv"};
}

Result<PrecisionProfile> NamedPrecisionProfile(std::string_view name) {
  using F = NumFormat;
  PrecisionProfile p;
  p.name = std::string(name);
  if (name == "fp32") return p;
  // Every other built-in profile starts from bf16 compute, as deployed engines do.
  p.weights = p.activations = p.index_q = p.index_k = p.kv = F::kBf16;
  if (name == "bf16") return p;
  if (name == "fp8-index") {
    p.index_q = p.index_k = F::kFp8;
    return p;
  }
  if (name == "mxfp4-index") {
    p.index_q = p.index_k = F::kMxfp4;
    return p;
  }
  if (name == "nvfp4-index") {
    p.index_q = p.index_k = F::kNvfp4;
    return p;
  }
  if (name == "fp8-kv") {
    p.kv = F::kFp8;
    return p;
  }
  std::string known;
  for (const auto& n : NamedPrecisionProfileNames()) known += (known.empty() ? "" : ", ") + n;
  return Status::InvalidArgument("unknown precision profile '" + std::string(name) +
                                 "' (built-in: " + known + ")");
}

}  // namespace nw
