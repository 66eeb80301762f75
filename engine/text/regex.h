// A compiled PCRE2 regular expression (UTF + UCP, so \p{L}, \p{N}, \s and lookahead behave as in
// the Oniguruma regexes of Hugging Face tokenizers). Invalid UTF-8 in a subject never matches and
// never errors (PCRE2_MATCH_INVALID_UTF): it ends up in the gaps between matches.
// Thread-safety: a compiled Regex is immutable; FindAll may run concurrently (each call owns its
// match data).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

struct pcre2_real_code_8;

namespace nw::text {

class Regex {
 public:
  /// Compiles `pattern` (JIT when available). Errors carry PCRE2's message and the offset.
  static Result<Regex> Compile(std::string_view pattern);

  Regex(Regex&&) noexcept = default;
  Regex& operator=(Regex&&) noexcept = default;

  /// The [begin, end) byte offsets of the successive non-overlapping, non-empty matches in
  /// `text`, left to right (Perl semantics for empty matches: retried as non-empty, then skipped).
  std::vector<std::pair<size_t, size_t>> FindAll(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct CodeDeleter {
    void operator()(pcre2_real_code_8* code) const;
  };
  Regex() = default;

  std::unique_ptr<pcre2_real_code_8, CodeDeleter> code_;
  std::string pattern_;
};

}  // namespace nw::text
