#include "task/scoring.h"

#include <cctype>

namespace nw {
namespace {

std::string_view Trim(std::string_view s) {
  size_t b = 0;
  size_t e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

}  // namespace

std::string AnswerSpan(std::string_view generated) {
  // Skip leading blank lines: "\n 1234567" answers on the next line.
  size_t start = 0;
  while (start < generated.size() && std::isspace(static_cast<unsigned char>(generated[start]))) {
    ++start;
  }
  std::string_view rest = generated.substr(start);
  const size_t nl = rest.find('\n');
  return std::string(Trim(nl == std::string_view::npos ? rest : rest.substr(0, nl)));
}

Outcome ScoreAnswer(const ScoreInput& in) {
  const std::string answer = AnswerSpan(in.generated);
  if (answer.empty()) return Outcome::kEmpty;
  if (!in.expected.empty() && answer.find(in.expected) != std::string::npos) return Outcome::kPass;
  const bool ran_out = !in.stopped && in.generated.find('\n', 0) == std::string_view::npos;
  if (ran_out) {
    // Does the answer end with a proper, non-empty prefix of the expected value?
    for (size_t len = in.expected.size() > 0 ? in.expected.size() - 1 : 0; len > 0; --len) {
      if (answer.size() >= len &&
          answer.compare(answer.size() - len, len, in.expected.substr(0, len)) == 0) {
        return Outcome::kTruncated;
      }
    }
  }
  return Outcome::kMiss;
}

}  // namespace nw
