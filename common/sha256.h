// SHA-256 digests (libsodium) for content-addressed job keys, prompt hashes and weight digests.
// Thread-safety: the free functions are pure; Sha256 is a single-owner streaming hasher.
#pragma once

#include <sodium.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace nw {

/// Streaming SHA-256.
class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t n);
  void Update(std::string_view s) { Update(s.data(), s.size()); }
  /// Finishes the hash and returns 64 lowercase hex characters. Call once.
  std::string HexDigest();

 private:
  crypto_hash_sha256_state state_;
};

/// Lowercase hex SHA-256 of a byte string.
std::string Sha256Hex(std::string_view data);
/// Lowercase hex SHA-256 of a file's contents (streamed).
Result<std::string> Sha256File(const std::filesystem::path& path);
/// Lowercase hex encoding of raw bytes.
std::string HexEncode(std::span<const uint8_t> bytes);

}  // namespace nw
