// Prefill/decode disaggregation on the CPU backend: a request's decode state (sequence.h
// SequenceState: KV window ring, compressed entries, index keys, compressor rolling states,
// position) as a serialized transfer buffer, exported by the prefill instance and imported by
// the decode instance.
//
// Transfer layout, version 1 (all integers and floats little-endian; docs/multi-gpu.md):
//   offset 0   char[4]  magic "NWPD"
//          4   u32      version (1)
//          8   u32      n_layers
//         12   u32      head_dim
//         16   u32      index_head_dim
//         20   u32      window_size
//         24   i64      position (tokens processed)
//         32   per layer, in layer order:
//                i32 ratio (0, 4 or 128)
//                7 arrays, each u64 count then count f32 values, in this order:
//                  window (last min(position, window) tokens, oldest first, head_dim each),
//                  compressed entries, index keys, compressor kv state, compressor score state,
//                  indexer kv state, indexer score state
//   end - 8    u64      FNV-1a 64 of every byte before it
// Import checks the magic, version, checksum, that every count fits in the bytes left, that the
// header matches the receiving config, that nothing trails, and (ImportTransfer) every array size
// against what the config and position imply; any failure is an error and the receiver is
// untouched.
// Thread-safety: pure functions; a Sequence as in sequence.h.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/checkpoint/config.h"
#include "engine/cpu/sequence.h"
#include "engine/fault.h"

namespace nw::parallel {

inline constexpr uint32_t kPdTransferVersion = 1;

std::vector<uint8_t> SerializeDecodeState(const ModelConfig& cfg, const cpu::SequenceState& st);
Result<cpu::SequenceState> DeserializeDecodeState(const ModelConfig& cfg,
                                                  std::span<const uint8_t> bytes);

/// The handoff faults (engine/fault.h) act on the transferred state, whichever device made it:
/// pd-handoff-loses-state zeroes the compressed entries and index keys written before the
/// handoff, compressor-state-not-restored the compressors' rolling states (what a fresh decode
/// instance holds where nothing was restored). Any other fault leaves the state unchanged.
void ApplyHandoffFault(Fault fault, cpu::SequenceState* state);

/// The prefill side: `seq`'s state as a transfer buffer.
std::vector<uint8_t> ExportTransfer(const ModelConfig& cfg, const cpu::Sequence& seq);
/// The decode side: loads a transfer buffer into a fresh Sequence of the same config.
Status ImportTransfer(const ModelConfig& cfg, std::span<const uint8_t> bytes, cpu::Sequence* seq);

}  // namespace nw::parallel
