#include "engine/fault.h"

#include <array>

namespace nw {

namespace {

constexpr std::array<FaultInfo, 10> kFaults = {{
    {Fault::kNone, "none", "the correct engine", ""},
    {Fault::kPdHandoffLosesState, "pd-handoff-loses-state",
     "the decode instance receives the KV window and the compressors' rolling states but not the "
     "compressed entries and index keys written before the handoff (they arrive zeroed), so its "
     "indexer and attention see only entries written after the handoff",
     "needlework issue 15 (the seeds' prefill-vs-decode suspicion); no public report"},
    {Fault::kIndexerRopeLayout, "indexer-rope-layout",
     "the indexer's queries and compressed index keys get RoPE in the half-split (rotate_half) "
     "layout instead of V4's interleaved pairs",
     "sglang PR #13495; DeepSeek's 2025-11-17 inference fix (indexer RoPE layout)"},
    {Fault::kRaggedKeyRange, "ragged-key-range",
     "in a multi-token prefill chunk every query's indexer key range ends where the chunk's last "
     "query's does (per-query ke not passed), so earlier queries score entries of later blocks",
     "sglang issue #11629 / PR #12583 (ks/ke of the ragged indexer)"},
    {Fault::kRaggedKeyOffset, "ragged-key-offset",
     "chunked prefill whose ragged indexer gets each query's key start offset to the chunk (ks = "
     "the chunk's first compressed entry, not the sequence's), so no prefill query can select an "
     "entry written by an earlier chunk; the prompt is prefilled in the backend's chunks, or in "
     "1,024-token chunks where the backend has none; decode (the paged path) is correct",
     "sglang issue #11629 / PR #12583 (ks/ke of the ragged indexer offset)"},
    {Fault::kPartialBlockMod4, "partial-block-mod4",
     "when a prefill chunk ends with 3 tokens of an unfinished ratio-4 block (prompt_len % 4 == "
     "3), those tokens are not kept in the compressors' rolling state, so the entry completed at "
     "the first decode step pools stale rows",
     "vLLM issue #55927 (wrong digit at deep retrieval iff prompt_len % 4 == 3)"},
    {Fault::kCompressorStateNotRestored, "compressor-state-not-restored",
     "a restored decode state (in needlework the PD import; the engine has no prefix cache) "
     "brings the KV window, compressed entries and index keys but leaves the compressors' "
     "rolling states fresh (zero)",
     "llama.cpp issue #25259 (compressor state not restored on cached prefix reuse)"},
    {Fault::kCompressedKvNoRope, "compressed-kv-no-rope",
     "the attention compressor stores its entries without RoPE (the indexer's keys keep theirs)",
     "mlx-lm PR #1189 review (compressed keys without RoPE)"},
    {Fault::kCompressRopeBase, "compress-rope-base",
     "layers with compression use rope_theta without YaRN instead of compress_rope_theta with "
     "YaRN (queries, KV, compressed entries, indexer)",
     "mlx-lm PR #1189 review (wrong RoPE base per layer)"},
    {Fault::kSharedExpertNoClamp, "shared-expert-no-clamp",
     "the shared expert's SwiGLU is not clamped to swiglu_limit (as swiglu_clamp_shared_expert: "
     "false)",
     "sglang PR #23776, transformers issue #46018, mlx-vlm PR #1469 (docs/engine-reference.md)"},
}};

}  // namespace

std::span<const FaultInfo> FaultCatalog() { return kFaults; }

const FaultInfo& FaultInfoOf(Fault fault) {
  for (const FaultInfo& f : kFaults) {
    if (f.fault == fault) return f;
  }
  return kFaults[0];
}

std::string_view FaultName(Fault fault) { return FaultInfoOf(fault).name; }

std::vector<std::string> FaultNames() {
  std::vector<std::string> out;
  for (const FaultInfo& f : kFaults) out.emplace_back(f.name);
  return out;
}

Result<Fault> ParseFault(std::string_view name) {
  for (const FaultInfo& f : kFaults) {
    if (f.name == name) return f.fault;
  }
  std::string known;
  for (const FaultInfo& f : kFaults) known += (known.empty() ? "" : ", ") + std::string(f.name);
  return Status::InvalidArgument("unknown fault '" + std::string(name) + "' (known: " + known +
                                 ")");
}

}  // namespace nw
