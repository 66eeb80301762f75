// Tokenizer: Hugging Face tokenizer.json, byte-level BPE (GPT-2 / DeepSeek style), encode and
// decode, plus a small BPE trainer for needlework's own models.
// Thread-safety: a loaded Tokenizer is immutable; Encode/Decode may run concurrently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nw {

class Tokenizer {
 public:
  Tokenizer();
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  /// Reads tokenizer.json; errors name the file and the JSON field at fault.
  static Result<Tokenizer> Load(const std::filesystem::path& path);
  static Result<Tokenizer> FromJson(const nlohmann::json& j, const std::string& source);

  /// Encodes text (no BOS added); special tokens written literally in the text are matched.
  std::vector<int32_t> Encode(std::string_view text) const;
  /// Decodes ids to text (byte-level, invalid UTF-8 kept as bytes).
  std::string Decode(std::span<const int32_t> ids) const;
  int vocab_size() const;
  std::optional<int32_t> TokenId(std::string_view token) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Trains a byte-level BPE tokenizer on `corpus` up to `vocab_size` tokens (256 byte tokens +
/// merges + `special_tokens`), deterministically, and returns tokenizer.json content.
Result<nlohmann::json> TrainByteLevelBpe(std::string_view corpus, int vocab_size,
                                         const std::vector<std::string>& special_tokens);

}  // namespace nw
