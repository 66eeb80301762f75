#include "engine/text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace nw::text {
namespace {

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};
using MatchData = std::unique_ptr<pcre2_match_data, MatchDataDeleter>;

std::string ErrorMessage(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof(buf));
  if (n < 0) return "PCRE2 error " + std::to_string(code);
  return std::string(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

}  // namespace

void Regex::CodeDeleter::operator()(pcre2_real_code_8* code) const { pcre2_code_free(code); }

Result<Regex> Regex::Compile(std::string_view pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error_code,
                                   &error_offset, nullptr);
  if (code == nullptr) {
    return Status::InvalidArgument("regex /" + std::string(pattern) +
                                   "/: " + ErrorMessage(error_code) + " at offset " +
                                   std::to_string(error_offset));
  }
  Regex re;
  re.code_.reset(code);
  re.pattern_ = std::string(pattern);
  // JIT is an optimisation: when it is unavailable pcre2_match interprets the pattern.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return re;
}

std::vector<std::pair<size_t, size_t>> Regex::FindAll(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  MatchData md(pcre2_match_data_create_from_pattern(code_.get(), nullptr));
  if (!md) return out;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t len = text.size();
  size_t start = 0;
  uint32_t options = 0;
  while (start <= len) {
    int rc = pcre2_match(code_.get(), subject, len, start, options, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (options == 0) break;
      // The non-empty retry after an empty match failed: step over one character.
      options = 0;
      ++start;
      while (start < len && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) ++start;
      continue;
    }
    if (rc < 0) break;  // resource limits: treat the rest of the text as unmatched
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t b = ov[0], e = ov[1];
    if (e > b) out.emplace_back(b, e);
    options = (e == b) ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
    start = e;
  }
  return out;
}

}  // namespace nw::text
