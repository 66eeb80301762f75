// The catalog of engine backends: every backend name needlework knows, with what it is, in one
// table. Campaign validation, worker capability, GPU planning and `nw serve` read it instead of
// keeping their own lists of names. It is pure data (no engine code), so the coordinator can link
// it without the engine; which entries this build and machine can run is asked of the engine
// (AvailableBackends in engine.h).
// Thread-safety: immutable data and pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/fault.h"
#include "engine/types.h"

namespace nw {

enum class DeviceKind { kCpu, kCuda };

struct BackendInfo {
  std::string_view name;          // "cuda-paged"
  DeviceKind device;              // where it runs
  KvLayout layout;                // how the KV / index caches are addressed
  int64_t prefill_chunk;          // tokens per prefill pass; 0 = the whole prompt in one pass
  bool disaggregated;             // prefill and decode on separate instances with a state transfer
  std::string_view summary;       // one line for help texts and docs
  bool traces;                    // records per-layer traces (ForwardTrace, `nw diff`)
  std::span<const Fault> faults;  // the faults (engine/fault.h) it replays, besides `none`
};

/// Every backend needlework defines, CPU first.
std::span<const BackendInfo> BackendCatalog();

/// The catalog entry named `name`, or null.
const BackendInfo* FindBackend(std::string_view name);

/// Every catalog name, in catalog order.
std::vector<std::string> BackendNames();

/// Ok when `info` replays `fault` (`none` always); Unsupported naming the backend, the fault and
/// the backends that replay it otherwise.
Status CheckBackendFault(const BackendInfo& info, Fault fault);

/// Ok when `info` records per-layer traces or `wanted` is false; Unsupported naming the backend
/// and the backends that do otherwise.
Status CheckBackendTrace(const BackendInfo& info, bool wanted);

/// "cpu", "cuda".
std::string_view DeviceKindName(DeviceKind kind);

}  // namespace nw
