// ModelConfig: the DeepSeek-V4 architecture hyperparameters, parsed from config.json.
//
// Accepts the Hugging Face DeepseekV4 key names (hidden_size, num_hidden_layers, ...) and the
// reference ModelArgs names (dim, n_layers, ...); see docs/checkpoint-format.md
// §1. Missing or inconsistent fields are errors naming the file and key; there are no silent
// defaults except the few the spec documents as defaults (n_mtp_layers 1, hc_eps/norm_eps 1e-6).
// Thread-safety: values.
#pragma once

#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nw {

enum class ScoreFunc { kSoftmax, kSigmoid, kSqrtSoftplus };

struct ModelConfig {
  int vocab_size = 0;
  int dim = 0;            // D (hidden_size)
  int n_layers = 0;       // main blocks
  int n_mtp_layers = 1;   // loaded and ignored
  int n_heads = 0;        // H query heads; one shared KV head
  int head_dim = 0;       // d = nope + rope
  int rope_head_dim = 0;  // r: trailing dims with interleaved RoPE
  int q_lora_rank = 0;
  int o_groups = 0;
  int o_lora_rank = 0;
  int window_size = 0;               // sliding window (128 in V4)
  std::vector<int> compress_ratios;  // n_layers + n_mtp_layers entries, each 0, 4 or 128
  double rope_theta = 0;             // ratio-0 layers, no YaRN
  double compress_rope_theta = 0;    // compressed layers and their indexer, with YaRN
  int original_seq_len = 0;          // YaRN original_max_position_embeddings (0 = YaRN off)
  double rope_factor = 1;
  double beta_fast = 32;
  double beta_slow = 1;
  int index_n_heads = 0;
  int index_head_dim = 0;
  int index_topk = 0;
  int hc_mult = 0;
  int hc_sinkhorn_iters = 0;
  double hc_eps = 1e-6;
  int n_routed_experts = 0;
  int n_shared_experts = 1;
  int n_activated_experts = 0;
  int moe_inter_dim = 0;
  ScoreFunc score_func = ScoreFunc::kSqrtSoftplus;
  double route_scale = 1;
  int n_hash_layers = 0;
  double swiglu_limit = 0;  // 0 = no clamp
  // Whether the shared expert's SwiGLU is clamped to swiglu_limit like the routed experts'
  // (DeepSeek's current V4 definition, HF transformers). false = the first release's unclamped
  // shared expert. config.json key "swiglu_clamp_shared_expert" (a JSON bool, both key styles),
  // optional, default true; always written by ToHfJson. It is part of the model digest through
  // the digested bytes of config.json (model_files.h). See docs/engine-reference.md.
  bool swiglu_clamp_shared_expert = true;
  double norm_eps = 1e-6;
  int max_position_embeddings = 0;  // longest context the model accepts
  int bos_token_id = -1;            // -1 when absent
  int eos_token_id = -1;

  int ratio(int layer) const { return compress_ratios.at(static_cast<size_t>(layer)); }
  bool has_indexer(int layer) const { return ratio(layer) == 4; }
  bool is_hash_layer(int layer) const { return layer < n_hash_layers; }
  int num_indexer_layers() const;

  /// Checks every structural rule (ratios in {0,4,128}, H % o_groups == 0, (d-r) % 64 == 0, ...).
  Status Validate() const;
  /// HF-keyed config.json content (model_type deepseek_v4, architectures, num_key_value_heads 1).
  /// rope_scaling is written only when YaRN is on (original_seq_len > 0); bos/eos only when set.
  nlohmann::json ToHfJson() const;

  friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

/// "softmax", "sigmoid" or "sqrtsoftplus".
std::string_view ScoreFuncName(ScoreFunc f);

/// Parses a config object; `source` names the file in error messages. The key style is taken
/// from the object: HF when it has hidden_size, num_hidden_layers, model_type or architectures,
/// else ModelArgs. Either name of a field is accepted in both styles (both present must agree).
/// HF configs need max_position_embeddings; ModelArgs configs take it from max_seq_len. YaRN is
/// off when HF rope_scaling is absent/null or ModelArgs original_seq_len is 0. Known HF-only and
/// runtime keys are accepted and ignored; any other key is an error. Ends with Validate().
Result<ModelConfig> ParseModelConfig(const nlohmann::json& j, const std::string& source);
/// Reads and parses DIR/config.json or a config file path.
Result<ModelConfig> LoadModelConfig(const std::filesystem::path& path);

}  // namespace nw
