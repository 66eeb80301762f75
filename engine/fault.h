// Known-bug replay: the one list of engine faults. A fault is a faithful replica of a real,
// publicly reported bug class of sparse-attention serving stacks, switched on per request
// (GenerateRequest::fault -> SequenceSpec::fault -> the backend's sequence), never globally.
// `none` is the correct engine and changes nothing (not a job key, not a label, not a bit of
// output). Which backends replay which fault is each catalog entry's BackendInfo::faults
// (backend_catalog.h); a backend refuses the others (CheckBackendFault). The table with the
// bug each fault replicates and its source is docs/faults.md.
// Pure data (no engine code), in the nw_backend_catalog library, so the coordinator can validate
// campaigns without the engine. Thread-safety: immutable data and pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nw {

enum class Fault : uint8_t {
  kNone,
  kPdHandoffLosesState,         // cpu-pd: pre-handoff compressed entries / index keys lost
  kIndexerRopeLayout,           // indexer q/k RoPE in the half-split layout, not interleaved
  kRaggedKeyRange,              // ragged prefill indexer: every query gets the chunk's key end
  kRaggedKeyOffset,             // ragged prefill indexer: key range starts at the chunk's start
  kPartialBlockMod4,            // prompt_len % 4 == 3: partial last block's rolling state lost
  kCompressorStateNotRestored,  // cpu-pd: compressor rolling states not restored on import
  kCompressedKvNoRope,          // compressed KV entries stored without RoPE
  kCompressRopeBase,            // compressed layers use rope_theta without YaRN
  kSharedExpertNoClamp,         // the shared expert's SwiGLU clamp missing
};

struct FaultInfo {
  Fault fault;
  std::string_view name;        // the campaign / CLI spelling, "pd-handoff-loses-state"
  std::string_view replicates;  // what the engine does wrong, one sentence
  std::string_view source;      // the public report(s) of the bug class
};

/// Every fault, `none` first, in enum order.
std::span<const FaultInfo> FaultCatalog();
/// The catalog entry of `fault` (never null for a valid enum value).
const FaultInfo& FaultInfoOf(Fault fault);
std::string_view FaultName(Fault fault);
/// The fault named `name`; InvalidArgument listing the known names otherwise.
Result<Fault> ParseFault(std::string_view name);
/// Every fault name, `none` first.
std::vector<std::string> FaultNames();

}  // namespace nw
