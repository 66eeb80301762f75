#include "engine/backend_catalog.h"

#include <array>

namespace nw {

namespace {

constexpr int64_t kPagedChunk = 256;  // tokens per prefill chunk of the paged backends

constexpr std::array<BackendInfo, 6> kCatalog = {{
    {"cpu", DeviceKind::kCpu, KvLayout::kContiguous, 0, false,
     "CPU reference: contiguous KV, the whole prompt in one ragged pass"},
    {"cpu-paged", DeviceKind::kCpu, KvLayout::kPaged, kPagedChunk, false,
     "CPU reference: paged KV, prefill in 256-token chunks through the paged indexer"},
    {"cpu-pd", DeviceKind::kCpu, KvLayout::kPaged, 0, true,
     "CPU: prefill instance -> decode-state transfer -> paged decode instance"},
    {"cuda", DeviceKind::kCuda, KvLayout::kContiguous, 0, false,
     "GPU: contiguous KV, the whole prompt in one ragged pass"},
    {"cuda-paged", DeviceKind::kCuda, KvLayout::kPaged, kPagedChunk, false,
     "GPU: paged KV, prefill in 256-token chunks through the paged indexer"},
    {"cuda-pd", DeviceKind::kCuda, KvLayout::kPaged, 0, true,
     "GPU: prefill instance -> decode-state transfer -> paged decode instance"},
}};

}  // namespace

std::span<const BackendInfo> BackendCatalog() { return kCatalog; }

const BackendInfo* FindBackend(std::string_view name) {
  for (const BackendInfo& b : kCatalog) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

std::vector<std::string> BackendNames() {
  std::vector<std::string> names;
  for (const BackendInfo& b : kCatalog) names.emplace_back(b.name);
  return names;
}

std::string_view DeviceKindName(DeviceKind kind) {
  return kind == DeviceKind::kCuda ? "cuda" : "cpu";
}

}  // namespace nw
