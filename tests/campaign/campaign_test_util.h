// Helpers for the campaign tests: a throwaway model folder that LocateModel and LoadModelConfig
// accept (the tiny A config of docs/checkpoint-format.md §5 with HF keys; dummy tokenizer and
// weights, which LocateModel only hashes).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/temp_dir.h"

namespace nw::testing_campaign {

inline constexpr const char* kTinyConfigJson = R"({
  "architectures": ["DeepseekV4ForCausalLM"],
  "model_type": "deepseek_v4",
  "num_key_value_heads": 1,
  "attention_bias": false,
  "hidden_act": "silu",
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "vocab_size": 1024,
  "hidden_size": 128,
  "num_hidden_layers": 3,
  "num_nextn_predict_layers": 1,
  "num_attention_heads": 4,
  "head_dim": 128,
  "qk_rope_head_dim": 64,
  "q_lora_rank": 128,
  "o_groups": 2,
  "o_lora_rank": 64,
  "sliding_window": 128,
  "compress_ratios": [0, 4, 128, 0],
  "rope_theta": 10000.0,
  "compress_rope_theta": 160000.0,
  "rope_scaling": {"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                   "beta_fast": 32.0, "beta_slow": 1.0},
  "index_n_heads": 4,
  "index_head_dim": 64,
  "index_topk": 16,
  "hc_mult": 4,
  "hc_sinkhorn_iters": 20,
  "hc_eps": 1e-6,
  "n_routed_experts": 4,
  "n_shared_experts": 1,
  "num_experts_per_tok": 2,
  "moe_intermediate_size": 128,
  "scoring_func": "sqrtsoftplus",
  "routed_scaling_factor": 1.5,
  "num_hash_layers": 1,
  "swiglu_limit": 10.0,
  "rms_norm_eps": 1e-6,
  "max_position_embeddings": 65536,
  "bos_token_id": 0,
  "eos_token_id": 1
})";

inline void WriteFile(const std::filesystem::path& p, const std::string& text) {
  test_support::WriteFileText(p, text);
}

/// A fresh folder under the test temp dir, removed on destruction.
using TempDir = test_support::TempDir;

/// Writes config.json, tokenizer.json and model.safetensors into `dir`.
inline void WriteTinyModel(const std::filesystem::path& dir,
                           const std::string& weights = "dummy weights") {
  WriteFile(dir / "config.json", kTinyConfigJson);
  WriteFile(dir / "tokenizer.json", R"({"model": {"type": "BPE"}})");
  WriteFile(dir / "model.safetensors", weights);
}

}  // namespace nw::testing_campaign
