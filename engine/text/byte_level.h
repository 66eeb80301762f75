// Byte-level helpers shared by the tokenizer, the BPE trainer and the NIAH builder: the GPT-2
// bytes_to_unicode map and small UTF-8 utilities.
// Thread-safety: pure functions over immutable tables.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nw::text {

/// The GPT-2 bytes_to_unicode map: printable Latin-1 bytes map to themselves, the other 68 bytes
/// to U+0100.. in byte order. Returns the code point for `b`.
char32_t ByteToCodePoint(uint8_t b);
/// The UTF-8 text of ByteToCodePoint(b) (one or two bytes).
const std::string& ByteToMapped(uint8_t b);
/// The byte whose mapped code point is `cp`, or nullopt.
std::optional<uint8_t> CodePointToByte(char32_t cp);
/// The 256 bytes in bytes_to_unicode order (ascending mapped code point): the order of the first
/// 256 ids in GPT-2's vocabulary ('!' first, then '"', ..., then 0x00 as U+0100, ...).
const std::array<uint8_t, 256>& BytesInMappedOrder();

/// Maps every byte of `raw` through ByteToMapped.
std::string MapBytes(std::string_view raw);
/// Inverts MapBytes. Returns nullopt when `mapped` holds a character outside the map.
std::optional<std::string> UnmapBytes(std::string_view mapped);

/// Appends the UTF-8 encoding of `cp` to `out`.
void AppendUtf8(char32_t cp, std::string* out);
/// Length in bytes of the well-formed UTF-8 character starting at s[i], or 0 when the bytes at
/// s[i] are not a well-formed character (overlong forms, surrogates and > U+10FFFF included).
size_t Utf8CharLength(std::string_view s, size_t i);
/// Decodes the well-formed character at s[i] (length from Utf8CharLength > 0).
char32_t DecodeUtf8(std::string_view s, size_t i, size_t len);
/// True when `s` is entirely well-formed UTF-8.
bool IsValidUtf8(std::string_view s);

}  // namespace nw::text
