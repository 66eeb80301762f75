#include "engine/backend_catalog.h"

#include <array>
#include <string>

namespace nw {

namespace {

constexpr int64_t kPagedChunk = 256;  // tokens per prefill chunk of the paged backends

// The faults each backend replays (docs/faults.md): every fault of the forward pass on every
// backend; the PD handoff faults need the decode-state transfer, so only cpu-pd and cuda-pd have
// them.
constexpr std::array<Fault, 7> kForwardFaults = {
    Fault::kIndexerRopeLayout,   Fault::kRaggedKeyRange,     Fault::kRaggedKeyOffset,
    Fault::kPartialBlockMod4,    Fault::kCompressedKvNoRope, Fault::kCompressRopeBase,
    Fault::kSharedExpertNoClamp,
};
constexpr std::array<Fault, 9> kPdFaults = {
    Fault::kPdHandoffLosesState, Fault::kCompressorStateNotRestored,
    Fault::kIndexerRopeLayout,   Fault::kRaggedKeyRange,
    Fault::kRaggedKeyOffset,     Fault::kPartialBlockMod4,
    Fault::kCompressedKvNoRope,  Fault::kCompressRopeBase,
    Fault::kSharedExpertNoClamp,
};

constexpr std::array<BackendInfo, 6> kCatalog = {{
    {"cpu", DeviceKind::kCpu, KvLayout::kContiguous, 0, false,
     "CPU reference: contiguous KV, the whole prompt in one ragged pass", true, kForwardFaults},
    {"cpu-paged", DeviceKind::kCpu, KvLayout::kPaged, kPagedChunk, false,
     "CPU reference: paged KV, prefill in 256-token chunks through the paged indexer", true,
     kForwardFaults},
    {"cpu-pd", DeviceKind::kCpu, KvLayout::kPaged, 0, true,
     "CPU: prefill instance -> decode-state transfer -> paged decode instance", true, kPdFaults},
    {"cuda", DeviceKind::kCuda, KvLayout::kContiguous, 0, false,
     "GPU: contiguous KV, the whole prompt in one ragged pass", false, kForwardFaults},
    {"cuda-paged", DeviceKind::kCuda, KvLayout::kPaged, kPagedChunk, false,
     "GPU: paged KV, prefill in 256-token chunks through the paged indexer", false, kForwardFaults},
    {"cuda-pd", DeviceKind::kCuda, KvLayout::kPaged, 0, true,
     "GPU: prefill instance -> decode-state transfer -> paged decode instance", false, kPdFaults},
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

Status CheckBackendFault(const BackendInfo& info, Fault fault) {
  if (fault == Fault::kNone) return Status::Ok();
  for (Fault f : info.faults) {
    if (f == fault) return Status::Ok();
  }
  std::string replay;
  for (const BackendInfo& b : kCatalog) {
    for (Fault f : b.faults) {
      if (f == fault) replay += (replay.empty() ? "" : ", ") + std::string(b.name);
    }
  }
  return Status::Unsupported("backend '" + std::string(info.name) + "' does not replay fault '" +
                             std::string(FaultName(fault)) + "' (replayed by: " +
                             (replay.empty() ? std::string("no backend") : replay) + ")");
}

Status CheckBackendTrace(const BackendInfo& info, bool wanted) {
  if (!wanted || info.traces) return Status::Ok();
  std::string with;
  for (const BackendInfo& b : kCatalog) {
    if (b.traces) with += (with.empty() ? "" : ", ") + std::string(b.name);
  }
  return Status::Unsupported("backend '" + std::string(info.name) +
                             "' does not record per-layer traces (traced by: " + with + ")");
}

std::string_view DeviceKindName(DeviceKind kind) {
  return kind == DeviceKind::kCuda ? "cuda" : "cpu";
}

}  // namespace nw
