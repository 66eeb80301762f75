#include "common/sha256.h"

#include <cstdio>
#include <memory>
#include <vector>

#include "common/file_io.h"

namespace nw {

Sha256::Sha256() {
  // sodium_init is idempotent and thread-safe; SHA-256 needs no other set-up.
  if (sodium_init() < 0) std::abort();
  crypto_hash_sha256_init(&state_);
}

void Sha256::Update(const void* data, size_t n) {
  crypto_hash_sha256_update(&state_, static_cast<const unsigned char*>(data), n);
}

std::string Sha256::HexDigest() {
  std::array<uint8_t, crypto_hash_sha256_BYTES> out{};
  crypto_hash_sha256_final(&state_, out.data());
  return HexEncode(out);
}

std::string HexEncode(std::span<const uint8_t> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

std::string Sha256Hex(std::string_view data) {
  Sha256 h;
  h.Update(data);
  return h.HexDigest();
}

Result<std::string> Sha256File(const std::filesystem::path& path) {
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) return Status::IoError("cannot open " + path.string() + " for hashing");
  Sha256 h;
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) h.Update(buf.data(), n);
  if (std::ferror(f.get())) return Status::IoError("read error while hashing " + path.string());
  return h.HexDigest();
}

}  // namespace nw
