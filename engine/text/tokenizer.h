// Tokenizer: Hugging Face tokenizer.json, byte-level BPE (GPT-2 / DeepSeek style), encode and
// decode, plus a small BPE trainer for needlework's own models.
// Thread-safety: a loaded Tokenizer is immutable; Encode/Decode may run concurrently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nw {

/// The GPT-2 pre-tokenizer regex (ByteLevel with use_regex = true).
inline constexpr std::string_view kGpt2PreTokenizerPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// Supported tokenizer.json subset: model BPE (vocab, merges as "a b" or ["a", "b"], unk_token,
/// fuse_unk, byte_fallback, ignore_merges; dropout and subword prefixes/suffixes must be unset);
/// added_tokens (matched literally before pre-tokenization, leftmost then longest, honouring
/// single_word/lstrip/rstrip); pre_tokenizer ByteLevel, Split, Digits, Sequence or null;
/// normalizer null (or an empty Sequence); decoder ByteLevel. post_processor, truncation and
/// padding are ignored: Encode never adds BOS/EOS. Added tokens decode to their literal content;
/// other tokens through the byte-level map.
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
  /// The pieces the pre-tokenizer cuts `text` into, as the BPE model sees them (byte-level
  /// mapped once a ByteLevel step has run). Added tokens are not matched here. For tests and
  /// debugging.
  std::vector<std::string> PreTokenize(std::string_view text) const;
  /// Decodes ids to text (byte-level, invalid UTF-8 kept as bytes).
  std::string Decode(std::span<const int32_t> ids) const;
  /// One more than the largest id of the model vocabulary and the added tokens.
  int vocab_size() const;
  /// The id of a token given as written in tokenizer.json ("Ġthe", "<|endoftext|>").
  std::optional<int32_t> TokenId(std::string_view token) const;
  /// The token string of `id` as written in tokenizer.json, or nullopt for an unused id.
  std::optional<std::string> IdToToken(int32_t id) const;
  /// True when `id` is an added token marked "special": true.
  bool IsSpecial(int32_t id) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Trains a byte-level BPE tokenizer on `corpus` up to `vocab_size` tokens (256 byte tokens +
/// merges + `special_tokens`), deterministically, and returns tokenizer.json content.
/// Words come from the GPT-2 regex (special tokens in the corpus are cut out and not learned);
/// each step merges the most frequent adjacent pair, ties going to the lexicographically smallest
/// (left, right) pair of token strings (bytewise, as written in the vocab, e.g. "Ġab"). Ids: the
/// 256 byte tokens in bytes_to_unicode order, then one per merge, then the special tokens
/// (added_tokens with "special": true). Training stops early when no pair is left, so the
/// vocabulary can come out smaller than `vocab_size`. Errors: InvalidArgument when vocab_size is
/// below 256 + special_tokens.size() or a special token is empty or repeated.
Result<nlohmann::json> TrainByteLevelBpe(std::string_view corpus, int vocab_size,
                                         const std::vector<std::string>& special_tokens);

}  // namespace nw
