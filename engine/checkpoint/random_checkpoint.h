// Random DeepSeek-V4 checkpoints for tests and for the untrained tiny models.
//
// WriteRandomCheckpoint writes DIR/config.json (ModelConfig::ToHfJson, plus quantization_config
// and expert_dtype "fp4" for the FP8+FP4 layout) and the weights (model.safetensors, or
// model-0000K-of-0000N.safetensors + index when max_shard_bytes > 0 and the model is larger) with
// every tensor of docs/checkpoint-format.md §2, MTP blocks included. It does not write
// tokenizer.json.
//
// Values are a pure function of (config, seed, tensor name): each tensor draws from a
// counter-based SplitMix64 stream keyed by the seed and an FNV-1a hash of its name, with
// Box-Muller normals. Initialization (TensorInit in tensor_specs.h): [out, in] matrices
// N(0,1)/sqrt(in); norms and hc scales 1; attn_sink and gate.bias 0; ape N(0,1)*0.02; hc fn
// N(0,1)*0.1/sqrt(in); hc base pre = logit(1/n), post = 0, comb = 4*I (near-identity mixing);
// tid2eid k distinct ids per row.
//
// Layouts: kBf16 stores every linear as BF16 with no .scale. kFp8Fp4 is the real V4 format:
// F8_E4M3 + F8_E8M0 128x128 scales for the FP8 linears, I8-packed e2m1 + per-32 F8_E8M0 scales
// for the routed experts (moe_inter_dim and dim must be multiples of 32). In both, the tensors the
// real checkpoint keeps in BF16/F32/I64 use those dtypes.
// Thread-safety: pure functions (apart from the files written).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/safetensors.h"

namespace nw {

enum class CheckpointLayout { kBf16, kFp8Fp4 };

/// Reductions of a config for random checkpoints at real per-layer shapes (`nw model init
/// --layers/--vocab/--routed-experts/--mtp-layers`); 0 (or -1 for mtp_layers) keeps the value.
struct ConfigReduction {
  int layers = 0;          // keep the first `layers` main blocks (their compress_ratios)
  int mtp_layers = -1;     // keep the first `mtp_layers` MTP blocks
  int vocab_size = 0;      // embed/head/tid2eid rows
  int routed_experts = 0;  // n_routed_experts (>= n_activated_experts)
};

/// `cfg` with the reductions applied: compress_ratios becomes the first `layers` main entries
/// followed by the first `mtp_layers` MTP entries; n_hash_layers is capped at layers - 1 (the
/// config rule n_hash_layers < n_layers); bos/eos ids outside a reduced vocabulary are dropped.
/// Every other field (all per-layer shapes) is kept. InvalidArgument for a reduction that grows
/// the config or breaks Validate().
Result<ModelConfig> ReduceConfig(ModelConfig cfg, const ConfigReduction& r);

/// Writes config.json and the weights into `dir` (created if needed).
Status WriteRandomCheckpoint(const ModelConfig& cfg, uint64_t seed, CheckpointLayout layout,
                             const std::filesystem::path& dir, int64_t max_shard_bytes = 0);

/// The tensors WriteRandomCheckpoint stores, in CheckpointTensorSpecs order (each quantized
/// weight followed by its .scale).
Result<std::vector<StWriteTensor>> RandomCheckpointTensors(const ModelConfig& cfg, uint64_t seed,
                                                           CheckpointLayout layout);

/// The config.json object WriteRandomCheckpoint writes.
nlohmann::json RandomCheckpointConfigJson(const ModelConfig& cfg, CheckpointLayout layout);

/// The fp32 values drawn for a planned tensor before they are stored (row-major, logical
/// shape); exposed so tests can check the storage rounding. tid2eid values are returned as
/// floats. NotFound for a name that is not in CheckpointTensorSpecs(cfg).
Result<std::vector<float>> RandomTensorValues(const ModelConfig& cfg, uint64_t seed,
                                              const std::string& name);

}  // namespace nw
