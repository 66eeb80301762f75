#include "engine/text/byte_level.h"

namespace nw::text {
namespace {

struct Tables {
  std::array<char32_t, 256> byte_to_cp{};
  std::array<std::string, 256> byte_to_mapped;
  std::array<int, 324> cp_to_byte{};  // mapped code points are all < 0x100 + 68
  std::array<uint8_t, 256> mapped_order{};

  Tables() {
    cp_to_byte.fill(-1);
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      byte_to_cp[b] =
          printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
    }
    for (int b = 0; b < 256; ++b) {
      AppendUtf8(byte_to_cp[b], &byte_to_mapped[b]);
      cp_to_byte[byte_to_cp[b]] = b;
    }
    int n = 0;
    for (int cp = 0; cp < static_cast<int>(cp_to_byte.size()); ++cp) {
      if (cp_to_byte[cp] >= 0) mapped_order[n++] = static_cast<uint8_t>(cp_to_byte[cp]);
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

char32_t ByteToCodePoint(uint8_t b) { return GetTables().byte_to_cp[b]; }

const std::string& ByteToMapped(uint8_t b) { return GetTables().byte_to_mapped[b]; }

std::optional<uint8_t> CodePointToByte(char32_t cp) {
  const Tables& t = GetTables();
  if (cp >= t.cp_to_byte.size() || t.cp_to_byte[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(t.cp_to_byte[cp]);
}

const std::array<uint8_t, 256>& BytesInMappedOrder() { return GetTables().mapped_order; }

std::string MapBytes(std::string_view raw) {
  const Tables& t = GetTables();
  std::string out;
  out.reserve(raw.size() * 2);
  for (char c : raw) out += t.byte_to_mapped[static_cast<uint8_t>(c)];
  return out;
}

std::optional<std::string> UnmapBytes(std::string_view mapped) {
  std::string out;
  out.reserve(mapped.size());
  for (size_t i = 0; i < mapped.size();) {
    size_t len = Utf8CharLength(mapped, i);
    if (len == 0) return std::nullopt;
    std::optional<uint8_t> b = CodePointToByte(DecodeUtf8(mapped, i, len));
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
    i += len;
  }
  return out;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t Utf8CharLength(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  const auto at = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = at(i);
  if (b0 < 0x80) return 1;
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // > U+10FFFF
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  if (at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if ((at(i + k) & 0xC0) != 0x80) return 0;
  }
  return len;
}

char32_t DecodeUtf8(std::string_view s, size_t i, size_t len) {
  const auto at = [&](size_t k) { return static_cast<char32_t>(static_cast<uint8_t>(s[i + k])); };
  switch (len) {
    case 1:
      return at(0);
    case 2:
      return ((at(0) & 0x1F) << 6) | (at(1) & 0x3F);
    case 3:
      return ((at(0) & 0x0F) << 12) | ((at(1) & 0x3F) << 6) | (at(2) & 0x3F);
    default:
      return ((at(0) & 0x07) << 18) | ((at(1) & 0x3F) << 12) | ((at(2) & 0x3F) << 6) |
             (at(3) & 0x3F);
  }
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t len = Utf8CharLength(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

}  // namespace nw::text
