#include "engine/text/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "common/file_io.h"
#include "engine/text/byte_level.h"
#include "engine/text/regex.h"

namespace nw {
namespace {

using text::Regex;
using json = nlohmann::json;

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// One step of the (flattened) pre-tokenizer pipeline.
struct PreTokStep {
  enum class Kind { kByteLevel, kSplit };
  Kind kind = Kind::kSplit;
  // ByteLevel: prepend a space to pieces that lack one; split with the GPT-2 regex when `regex`.
  bool add_prefix_space = false;
  // Split / Digits / ByteLevel(use_regex): the pattern; a Split with a String pattern uses
  // `literal` instead.
  std::optional<Regex> regex;
  std::optional<std::string> literal;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
};

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
};

// A span of a piece: [begin, end) and whether it was a match of the split pattern.
struct Span {
  size_t begin;
  size_t end;
  bool is_match;
};

constexpr size_t kMaxCachedWordBytes = 128;
constexpr size_t kMaxCacheEntries = 1 << 16;

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool IsWordByte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || u == '_' ||
         u >= 0x80;
}

// ---- JSON field access with errors that name the file and the field ---------------------------

class Fields {
 public:
  explicit Fields(std::string source) : source_(std::move(source)) {}

  Status Error(const std::string& field, const std::string& msg) const {
    return Status::InvalidArgument(source_ + ": " + field + ": " + msg);
  }
  Status Unsupported(const std::string& field, const std::string& msg) const {
    return Status::Unsupported(source_ + ": " + field + ": " + msg);
  }

  // A bool member; missing or null gives `def`.
  Result<bool> Bool(const json& obj, const std::string& key, const std::string& path,
                    bool def) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return def;
    if (!it->is_boolean()) return Error(path + "." + key, "expected a boolean");
    return it->get<bool>();
  }
  // A string member; missing or null gives nullopt.
  Result<std::optional<std::string>> OptString(const json& obj, const std::string& key,
                                               const std::string& path) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::optional<std::string>();
    if (!it->is_string()) return Error(path + "." + key, "expected a string");
    return std::optional<std::string>(it->get<std::string>());
  }
  Result<std::string> Type(const json& obj, const std::string& path) const {
    if (!obj.is_object()) return Error(path, "expected an object");
    auto it = obj.find("type");
    if (it == obj.end() || !it->is_string()) return Error(path + ".type", "expected a string");
    return it->get<std::string>();
  }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

std::string Quote(std::string_view s) {
  std::string out = "'";
  out += s;
  out += "'";
  return out;
}

// Spans of `text` covering it entirely: the matches of the step's pattern and the gaps between.
std::vector<Span> FindSpans(const PreTokStep& step, std::string_view text) {
  std::vector<std::pair<size_t, size_t>> matches;
  if (step.literal) {
    const std::string& lit = *step.literal;
    if (!lit.empty()) {
      size_t pos = 0;
      while ((pos = text.find(lit, pos)) != std::string_view::npos) {
        matches.emplace_back(pos, pos + lit.size());
        pos += lit.size();
      }
    }
  } else if (step.regex) {
    matches = step.regex->FindAll(text);
  }
  std::vector<Span> spans;
  spans.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (b > prev) spans.push_back({prev, b, false});
    spans.push_back({b, e, true});
    prev = e;
  }
  if (prev < text.size()) spans.push_back({prev, text.size(), false});
  if (step.invert) {
    for (Span& s : spans) s.is_match = !s.is_match;
  }
  return spans;
}

// Applies a split behaviour (Hugging Face semantics) and appends the non-empty pieces to `out`.
void SplitPiece(const PreTokStep& step, const std::string& piece, std::vector<std::string>* out) {
  std::vector<Span> spans = FindSpans(step, piece);
  std::vector<std::pair<size_t, size_t>> parts;
  parts.reserve(spans.size());
  switch (step.behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) parts.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) parts.emplace_back(s.begin, s.end);
      }
      break;
    case SplitBehavior::kContiguous: {
      bool prev_match = false;
      for (const Span& s : spans) {
        if (s.is_match && prev_match && !parts.empty()) {
          parts.back().second = s.end;
        } else {
          parts.emplace_back(s.begin, s.end);
        }
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !prev_match && !parts.empty()) {
          parts.back().second = s.end;
        } else {
          parts.emplace_back(s.begin, s.end);
        }
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !prev_match && !parts.empty()) {
          parts.back().first = it->begin;
        } else {
          parts.emplace_back(it->begin, it->end);
        }
        prev_match = it->is_match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
    }
  }
  for (const auto& [b, e] : parts) {
    if (e > b) out->push_back(piece.substr(b, e - b));
  }
}

Result<SplitBehavior> ParseBehavior(const Fields& f, const json& v, const std::string& path) {
  if (!v.is_string()) return f.Error(path, "expected a string");
  const std::string s = v.get<std::string>();
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  return f.Error(path, "unknown split behavior " + Quote(s));
}

Status ParsePreTokenizer(const Fields& f, const json& j, const std::string& path,
                         std::vector<PreTokStep>* steps) {
  if (j.is_null()) return Status::Ok();
  NW_ASSIGN_OR_RETURN(std::string type, f.Type(j, path));
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) {
      return f.Error(path + ".pretokenizers", "expected an array");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      NW_RETURN_IF_ERROR(ParsePreTokenizer(
          f, (*it)[i], path + ".pretokenizers[" + std::to_string(i) + "]", steps));
    }
    return Status::Ok();
  }
  PreTokStep step;
  if (type == "ByteLevel") {
    step.kind = PreTokStep::Kind::kByteLevel;
    NW_ASSIGN_OR_RETURN(step.add_prefix_space, f.Bool(j, "add_prefix_space", path, true));
    NW_ASSIGN_OR_RETURN(bool use_regex, f.Bool(j, "use_regex", path, true));
    NW_ASSIGN_OR_RETURN(bool trim_offsets, f.Bool(j, "trim_offsets", path, true));
    (void)trim_offsets;  // offsets are not reported, so trimming them changes nothing
    if (use_regex) {
      Result<Regex> re = Regex::Compile(kGpt2PreTokenizerPattern);
      if (!re.ok()) return f.Error(path + ".use_regex", re.status().message());
      step.regex.emplace(std::move(re).value());
    }
  } else if (type == "Split") {
    step.kind = PreTokStep::Kind::kSplit;
    auto pat = j.find("pattern");
    if (pat == j.end() || !pat->is_object() || pat->size() != 1) {
      return f.Error(path + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    }
    if (auto r = pat->find("Regex"); r != pat->end()) {
      if (!r->is_string()) return f.Error(path + ".pattern.Regex", "expected a string");
      Result<Regex> re = Regex::Compile(r->get<std::string>());
      if (!re.ok()) return f.Error(path + ".pattern.Regex", re.status().message());
      step.regex.emplace(std::move(re).value());
    } else if (auto s = pat->find("String"); s != pat->end()) {
      if (!s->is_string()) return f.Error(path + ".pattern.String", "expected a string");
      step.literal = s->get<std::string>();
    } else {
      return f.Error(path + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    }
    auto beh = j.find("behavior");
    if (beh == j.end()) return f.Error(path + ".behavior", "missing");
    NW_ASSIGN_OR_RETURN(step.behavior, ParseBehavior(f, *beh, path + ".behavior"));
    NW_ASSIGN_OR_RETURN(step.invert, f.Bool(j, "invert", path, false));
  } else if (type == "Digits") {
    step.kind = PreTokStep::Kind::kSplit;
    NW_ASSIGN_OR_RETURN(bool individual, f.Bool(j, "individual_digits", path, false));
    Result<Regex> re = Regex::Compile("\\p{N}");
    if (!re.ok()) return f.Error(path, re.status().message());
    step.regex.emplace(std::move(re).value());
    step.behavior = individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
  } else {
    return f.Unsupported(path + ".type", "unsupported pre-tokenizer " + Quote(type) +
                                             " (supported: ByteLevel, Split, Digits, Sequence)");
  }
  steps->push_back(std::move(step));
  return Status::Ok();
}

Status CheckNormalizer(const Fields& f, const json& j, const std::string& path) {
  if (j.is_null()) return Status::Ok();
  NW_ASSIGN_OR_RETURN(std::string type, f.Type(j, path));
  if (type == "Sequence") {
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array())
      return f.Error(path + ".normalizers", "expected an array");
    for (size_t i = 0; i < it->size(); ++i) {
      NW_RETURN_IF_ERROR(
          CheckNormalizer(f, (*it)[i], path + ".normalizers[" + std::to_string(i) + "]"));
    }
    return Status::Ok();
  }
  return f.Unsupported(path + ".type", "unsupported normalizer " + Quote(type) +
                                           " (only null or an empty Sequence is supported)");
}

Status CheckDecoder(const Fields& f, const json& j, const std::string& path) {
  if (j.is_null()) {
    return f.Unsupported(path, "null decoder is not supported (expected ByteLevel)");
  }
  NW_ASSIGN_OR_RETURN(std::string type, f.Type(j, path));
  if (type == "ByteLevel") return Status::Ok();
  if (type == "Sequence") {
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array() || it->size() != 1) {
      return f.Unsupported(path + ".decoders", "only a Sequence of one ByteLevel is supported");
    }
    return CheckDecoder(f, (*it)[0], path + ".decoders[0]");
  }
  return f.Unsupported(path + ".type",
                       "unsupported decoder " + Quote(type) + " (only ByteLevel is supported)");
}

Result<int32_t> ParseId(const Fields& f, const json& v, const std::string& path) {
  if (!v.is_number_integer()) return f.Error(path, "expected a non-negative integer id");
  const int64_t id = v.get<int64_t>();
  if (id < 0 || id > std::numeric_limits<int32_t>::max() - 1) {
    return f.Error(path, "id " + std::to_string(id) + " out of range");
  }
  return static_cast<int32_t>(id);
}

std::string ShortToken(std::string_view s) {
  if (s.size() <= 40) return Quote(s);
  return Quote(std::string(s.substr(0, 40)) + "...");
}

}  // namespace

// ---- Impl -----------------------------------------------------------------------------------

struct Tokenizer::Impl {
  std::string source;
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::string> id_to_token;  // model tokens by id ("" where absent)
  std::vector<int32_t> id_to_added;      // index into `added` by id, -1 where none
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // pair -> (rank, new id)
  std::optional<int32_t> unk_id;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  std::vector<AddedToken> added;
  std::array<std::vector<int32_t>, 256> added_by_first_byte;  // indices into `added`, longest first
  std::vector<PreTokStep> steps;
  int vocab_size = 0;

  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  void EncodeText(std::string_view text, std::vector<int32_t>* out) const;
  std::vector<std::string> PreTokenize(std::string_view text) const;
  void EncodeWord(const std::string& word, std::vector<int32_t>* out) const;
  std::vector<int32_t> BpeWord(const std::string& word) const;
};

std::vector<std::string> Tokenizer::Impl::PreTokenize(std::string_view text) const {
  std::vector<std::string> pieces{std::string(text)};
  for (const PreTokStep& step : steps) {
    std::vector<std::string> next;
    next.reserve(pieces.size());
    for (std::string& piece : pieces) {
      if (step.kind == PreTokStep::Kind::kByteLevel) {
        if (step.add_prefix_space && !piece.empty() && piece[0] != ' ') piece.insert(0, " ");
        if (step.regex) {
          std::vector<std::string> parts;
          SplitPiece(step, piece, &parts);
          for (const std::string& p : parts) next.push_back(text::MapBytes(p));
        } else if (!piece.empty()) {
          next.push_back(text::MapBytes(piece));
        }
      } else {
        SplitPiece(step, piece, &next);
      }
    }
    pieces = std::move(next);
  }
  return pieces;
}

std::vector<int32_t> Tokenizer::Impl::BpeWord(const std::string& word) const {
  struct Sym {
    int32_t id;
    int prev;
    int next;
    bool alive;
  };
  std::vector<Sym> syms;
  syms.reserve(word.size());
  int32_t pending_unk = -1;  // an unknown-token run not yet emitted
  auto add = [&syms](int32_t id) {
    const int n = static_cast<int>(syms.size());
    syms.push_back({id, n - 1, -1, true});
    if (n > 0) syms[n - 1].next = n;
  };
  for (size_t i = 0; i < word.size();) {
    size_t len = text::Utf8CharLength(word, i);
    if (len == 0) len = 1;  // an invalid byte stands for itself
    const std::string ch = word.substr(i, len);
    i += len;
    if (auto it = vocab.find(ch); it != vocab.end()) {
      if (pending_unk >= 0) add(pending_unk);
      pending_unk = -1;
      add(it->second);
      continue;
    }
    if (byte_fallback) {
      std::vector<int32_t> ids;
      for (char c : ch) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "<0x%02X>", static_cast<unsigned char>(c));
        auto bt = vocab.find(buf);
        if (bt == vocab.end()) break;
        ids.push_back(bt->second);
      }
      if (ids.size() == ch.size()) {
        if (pending_unk >= 0) add(pending_unk);
        pending_unk = -1;
        for (int32_t id : ids) add(id);
        continue;
      }
    }
    if (unk_id) {
      if (pending_unk >= 0 && !fuse_unk) add(pending_unk);
      pending_unk = *unk_id;
    }
    // Without an unknown token the character is dropped, as Hugging Face tokenizers does.
  }
  if (pending_unk >= 0) add(pending_unk);

  struct Cand {
    int32_t rank;
    int pos;
    int32_t new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push_pair = [&](int pos) {
    if (pos < 0 || syms[pos].next < 0) return;
    auto it = merges.find(PairKey(syms[pos].id, syms[syms[pos].next].id));
    if (it != merges.end()) heap.push({it->second.first, pos, it->second.second});
  };
  for (int p = 0; p + 1 < static_cast<int>(syms.size()); ++p) push_pair(p);
  while (!heap.empty()) {
    const Cand top = heap.top();
    heap.pop();
    Sym& left = syms[top.pos];
    if (!left.alive || left.next < 0) continue;
    const int rpos = left.next;
    Sym& right = syms[rpos];
    auto it = merges.find(PairKey(left.id, right.id));
    if (it == merges.end() || it->second.second != top.new_id) continue;
    left.id = top.new_id;
    left.next = right.next;
    right.alive = false;
    if (right.next >= 0) syms[right.next].prev = top.pos;
    push_pair(left.prev);
    push_pair(top.pos);
  }
  std::vector<int32_t> ids;
  for (const Sym& s : syms) {
    if (s.alive) ids.push_back(s.id);
  }
  return ids;
}

void Tokenizer::Impl::EncodeWord(const std::string& word, std::vector<int32_t>* out) const {
  if (ignore_merges) {
    if (auto it = vocab.find(word); it != vocab.end()) {
      out->push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (auto it = cache.find(word); it != cache.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids = BpeWord(word);
  out->insert(out->end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (cache.size() < kMaxCacheEntries) cache.emplace(word, std::move(ids));
  }
}

void Tokenizer::Impl::EncodeText(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  for (const std::string& piece : PreTokenize(text)) EncodeWord(piece, out);
}

// ---- Tokenizer ------------------------------------------------------------------------------

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Result<Tokenizer> Tokenizer::Load(const std::filesystem::path& path) {
  Result<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return Status::NotFound(path.string() + ": cannot open tokenizer file");
    }
    return text.status();
  }
  json j;
  try {
    j = json::parse(*text);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(path.string() + ": invalid JSON: " + e.what());
  }
  return FromJson(j, path.string());
}

Result<Tokenizer> Tokenizer::FromJson(const nlohmann::json& j, const std::string& source) {
  try {
    Fields f(source);
    if (!j.is_object()) return f.Error("(root)", "expected a JSON object");
    Tokenizer tok;
    Impl& im = *tok.impl_;
    im.source = source;

    // normalizer / decoder.
    NW_RETURN_IF_ERROR(
        CheckNormalizer(f, j.contains("normalizer") ? j["normalizer"] : json(), "normalizer"));
    if (!j.contains("decoder")) return f.Error("decoder", "missing (expected ByteLevel)");
    NW_RETURN_IF_ERROR(CheckDecoder(f, j["decoder"], "decoder"));

    // model.
    auto mit = j.find("model");
    if (mit == j.end() || !mit->is_object()) return f.Error("model", "expected an object");
    const json& m = *mit;
    if (auto t = m.find("type"); t != m.end()) {
      if (!t->is_string()) return f.Error("model.type", "expected a string");
      if (t->get<std::string>() != "BPE") {
        return f.Unsupported("model.type", "unsupported model " + Quote(t->get<std::string>()) +
                                               " (only BPE is supported)");
      }
    }
    if (auto d = m.find("dropout"); d != m.end() && !d->is_null()) {
      if (!d->is_number() || d->get<double>() != 0.0) {
        return f.Unsupported("model.dropout", "BPE dropout is not supported (must be null)");
      }
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      NW_ASSIGN_OR_RETURN(std::optional<std::string> v, f.OptString(m, key, "model"));
      if (v && !v->empty()) {
        return f.Unsupported(std::string("model.") + key,
                             "must be null or empty, got " + Quote(*v));
      }
    }
    NW_ASSIGN_OR_RETURN(im.fuse_unk, f.Bool(m, "fuse_unk", "model", false));
    NW_ASSIGN_OR_RETURN(im.byte_fallback, f.Bool(m, "byte_fallback", "model", false));
    NW_ASSIGN_OR_RETURN(im.ignore_merges, f.Bool(m, "ignore_merges", "model", false));

    auto vit = m.find("vocab");
    if (vit == m.end() || !vit->is_object()) return f.Error("model.vocab", "expected an object");
    int32_t max_id = -1;
    im.vocab.reserve(vit->size());
    for (auto it = vit->begin(); it != vit->end(); ++it) {
      NW_ASSIGN_OR_RETURN(int32_t id,
                          ParseId(f, it.value(), "model.vocab[" + ShortToken(it.key()) + "]"));
      im.vocab.emplace(it.key(), id);
      max_id = std::max(max_id, id);
    }
    im.id_to_token.assign(static_cast<size_t>(max_id + 1), std::string());
    std::vector<bool> seen(static_cast<size_t>(max_id + 1), false);
    for (const auto& [token, id] : im.vocab) {
      if (seen[id]) {
        return f.Error("model.vocab", "id " + std::to_string(id) + " is used by both " +
                                          ShortToken(im.id_to_token[id]) + " and " +
                                          ShortToken(token));
      }
      seen[id] = true;
      im.id_to_token[id] = token;
    }

    if (auto u = m.find("unk_token"); u != m.end() && !u->is_null()) {
      if (!u->is_string()) return f.Error("model.unk_token", "expected a string or null");
      auto it = im.vocab.find(u->get<std::string>());
      if (it == im.vocab.end()) {
        return f.Error("model.unk_token",
                       ShortToken(u->get<std::string>()) + " is not in model.vocab");
      }
      im.unk_id = it->second;
    }

    auto mg = m.find("merges");
    if (mg == m.end() || !mg->is_array()) return f.Error("model.merges", "expected an array");
    im.merges.reserve(mg->size());
    for (size_t i = 0; i < mg->size(); ++i) {
      const json& e = (*mg)[i];
      const std::string field = "model.merges[" + std::to_string(i) + "]";
      std::string a, b;
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          return f.Error(
              field, "expected \"a b\" (two tokens separated by one space), got " + ShortToken(s));
        }
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        a = e[0].get<std::string>();
        b = e[1].get<std::string>();
      } else {
        return f.Error(field, "expected \"a b\" or [\"a\", \"b\"]");
      }
      auto ia = im.vocab.find(a);
      if (ia == im.vocab.end())
        return f.Error(field, "token " + ShortToken(a) + " is not in model.vocab");
      auto ib = im.vocab.find(b);
      if (ib == im.vocab.end())
        return f.Error(field, "token " + ShortToken(b) + " is not in model.vocab");
      auto in = im.vocab.find(a + b);
      if (in == im.vocab.end()) {
        return f.Error(field, "merged token " + ShortToken(a + b) + " is not in model.vocab");
      }
      im.merges.emplace(PairKey(ia->second, ib->second),
                        std::make_pair(static_cast<int32_t>(i), in->second));
    }

    // added_tokens.
    if (auto at = j.find("added_tokens"); at != j.end() && !at->is_null()) {
      if (!at->is_array()) return f.Error("added_tokens", "expected an array");
      for (size_t i = 0; i < at->size(); ++i) {
        const json& e = (*at)[i];
        const std::string path = "added_tokens[" + std::to_string(i) + "]";
        if (!e.is_object()) return f.Error(path, "expected an object");
        AddedToken t;
        auto c = e.find("content");
        if (c == e.end() || !c->is_string() || c->get<std::string>().empty()) {
          return f.Error(path + ".content", "expected a non-empty string");
        }
        t.content = c->get<std::string>();
        auto idv = e.find("id");
        if (idv == e.end()) return f.Error(path + ".id", "missing");
        NW_ASSIGN_OR_RETURN(t.id, ParseId(f, *idv, path + ".id"));
        NW_ASSIGN_OR_RETURN(t.special, f.Bool(e, "special", path, false));
        NW_ASSIGN_OR_RETURN(t.single_word, f.Bool(e, "single_word", path, false));
        NW_ASSIGN_OR_RETURN(t.lstrip, f.Bool(e, "lstrip", path, false));
        NW_ASSIGN_OR_RETURN(t.rstrip, f.Bool(e, "rstrip", path, false));
        if (static_cast<size_t>(t.id) < im.id_to_token.size() && !im.id_to_token[t.id].empty() &&
            im.id_to_token[t.id] != t.content) {
          return f.Error(path + ".id", "id " + std::to_string(t.id) + " of " +
                                           ShortToken(t.content) + " belongs to model token " +
                                           ShortToken(im.id_to_token[t.id]));
        }
        for (const AddedToken& o : im.added) {
          if (o.id == t.id && o.content != t.content) {
            return f.Error(path + ".id", "id " + std::to_string(t.id) + " is used twice");
          }
          if (o.content == t.content && o.id != t.id) {
            return f.Error(path + ".content", ShortToken(t.content) + " appears twice");
          }
        }
        im.added.push_back(std::move(t));
      }
    }
    for (const AddedToken& t : im.added) max_id = std::max(max_id, t.id);
    im.vocab_size = max_id + 1;
    im.id_to_added.assign(static_cast<size_t>(im.vocab_size), -1);
    for (size_t i = 0; i < im.added.size(); ++i) {
      im.id_to_added[im.added[i].id] = static_cast<int32_t>(i);
      im.added_by_first_byte[static_cast<uint8_t>(im.added[i].content[0])].push_back(
          static_cast<int32_t>(i));
    }
    for (auto& bucket : im.added_by_first_byte) {
      std::stable_sort(bucket.begin(), bucket.end(), [&im](int32_t x, int32_t y) {
        return im.added[x].content.size() > im.added[y].content.size();
      });
    }

    // pre_tokenizer.
    NW_RETURN_IF_ERROR(ParsePreTokenizer(
        f, j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json(), "pre_tokenizer", &im.steps));
    return tok;
  } catch (const json::exception& e) {
    return Status::InvalidArgument(source + ": malformed tokenizer JSON: " + e.what());
  }
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text) const {
  const Impl& im = *impl_;
  std::vector<int32_t> out;
  size_t seg_begin = 0;
  size_t i = 0;
  while (i < text.size()) {
    const auto& bucket = im.added_by_first_byte[static_cast<uint8_t>(text[i])];
    const AddedToken* hit = nullptr;
    for (int32_t idx : bucket) {
      const AddedToken& t = im.added[idx];
      if (text.compare(i, t.content.size(), t.content) != 0) continue;
      if (t.single_word) {
        const size_t e = i + t.content.size();
        if ((i > 0 && IsWordByte(text[i - 1])) || (e < text.size() && IsWordByte(text[e]))) {
          continue;
        }
      }
      hit = &t;
      break;
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    size_t begin = i;
    size_t end = i + hit->content.size();
    if (hit->lstrip) {
      while (begin > seg_begin && IsAsciiSpace(text[begin - 1])) --begin;
    }
    if (hit->rstrip) {
      while (end < text.size() && IsAsciiSpace(text[end])) ++end;
    }
    im.EncodeText(text.substr(seg_begin, begin - seg_begin), &out);
    out.push_back(hit->id);
    seg_begin = end;
    i = end;
  }
  im.EncodeText(text.substr(seg_begin), &out);
  return out;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids) const {
  const Impl& im = *impl_;
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= im.vocab_size) continue;
    if (const int32_t a = im.id_to_added[id]; a >= 0) {
      out += im.added[a].content;
      continue;
    }
    if (static_cast<size_t>(id) >= im.id_to_token.size()) continue;
    const std::string& tok = im.id_to_token[id];
    if (std::optional<std::string> raw = text::UnmapBytes(tok)) {
      out += *raw;
    } else {
      out += tok;  // a token outside the byte map decodes to its own text (as Hugging Face does)
    }
  }
  return out;
}

std::vector<std::string> Tokenizer::PreTokenize(std::string_view text) const {
  if (text.empty()) return {};
  return impl_->PreTokenize(text);
}

int Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> Tokenizer::TokenId(std::string_view token) const {
  const Impl& im = *impl_;
  for (const AddedToken& t : im.added) {
    if (t.content == token) return t.id;
  }
  if (auto it = im.vocab.find(std::string(token)); it != im.vocab.end()) return it->second;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  const Impl& im = *impl_;
  if (id < 0 || id >= im.vocab_size) return std::nullopt;
  if (const int32_t a = im.id_to_added[id]; a >= 0) return im.added[a].content;
  if (static_cast<size_t>(id) < im.id_to_token.size() && !im.id_to_token[id].empty()) {
    return im.id_to_token[id];
  }
  return std::nullopt;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const Impl& im = *impl_;
  if (id < 0 || id >= im.vocab_size) return false;
  const int32_t a = im.id_to_added[id];
  return a >= 0 && im.added[a].special;
}

}  // namespace nw
