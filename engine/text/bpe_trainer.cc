// TrainByteLevelBpe: deterministic byte-level BPE training with incremental pair counts.
//
// Words come from the GPT-2 pre-tokenizer regex (special tokens written in the corpus are cut out
// first and never counted). Each step merges the most frequent adjacent pair; ties go to the
// lexicographically smallest (left token string, right token string), compared bytewise on the
// byte-level (mapped) strings as they appear in tokenizer.json. After a merge only the words that
// held the pair are rewritten, and pair counts change by the deltas of those rewrites; a lazy
// max-heap picks the next pair.
#include <algorithm>
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <queue>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "engine/text/byte_level.h"
#include "engine/text/regex.h"
#include "engine/text/tokenizer.h"

namespace nw {
namespace {

using json = nlohmann::json;

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
int32_t PairLeft(uint64_t k) { return static_cast<int32_t>(k >> 32); }
int32_t PairRight(uint64_t k) { return static_cast<int32_t>(k & 0xFFFFFFFFu); }

struct Word {
  std::vector<int32_t> syms;
  int64_t count = 0;
};

// Cuts `corpus` at literal occurrences of the special tokens (longest first) and hands the text
// between them to `fn`.
template <typename Fn>
void ForEachNonSpecialSegment(std::string_view corpus, const std::vector<std::string>& specials,
                              Fn&& fn) {
  std::vector<std::string> sorted = specials;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  size_t seg = 0;
  size_t i = 0;
  while (i < corpus.size()) {
    const std::string* hit = nullptr;
    for (const std::string& s : sorted) {
      if (corpus.compare(i, s.size(), s) == 0) {
        hit = &s;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    if (i > seg) fn(corpus.substr(seg, i - seg));
    i += hit->size();
    seg = i;
  }
  if (corpus.size() > seg) fn(corpus.substr(seg));
}

}  // namespace

Result<nlohmann::json> TrainByteLevelBpe(std::string_view corpus, int vocab_size,
                                         const std::vector<std::string>& special_tokens) {
  const int num_specials = static_cast<int>(special_tokens.size());
  if (vocab_size < 256 + num_specials) {
    return Status::InvalidArgument("TrainByteLevelBpe: vocab_size " + std::to_string(vocab_size) +
                                   " is smaller than 256 byte tokens + " +
                                   std::to_string(num_specials) + " special tokens");
  }
  {
    std::unordered_set<std::string> seen;
    for (size_t i = 0; i < special_tokens.size(); ++i) {
      if (special_tokens[i].empty()) {
        return Status::InvalidArgument("TrainByteLevelBpe: special_tokens[" + std::to_string(i) +
                                       "] is empty");
      }
      if (!seen.insert(special_tokens[i]).second) {
        return Status::InvalidArgument("TrainByteLevelBpe: special_tokens[" + std::to_string(i) +
                                       "] '" + special_tokens[i] + "' is repeated");
      }
    }
  }
  Result<text::Regex> re = text::Regex::Compile(kGpt2PreTokenizerPattern);
  if (!re.ok()) return re.status().WithContext("TrainByteLevelBpe");

  // Token table: the 256 byte tokens in bytes_to_unicode order.
  std::vector<std::string> tokens;
  std::unordered_map<std::string, int32_t> token_ids;
  std::array<int32_t, 256> byte_id{};
  for (int i = 0; i < 256; ++i) {
    const uint8_t b = text::BytesInMappedOrder()[i];
    byte_id[b] = i;
    tokens.push_back(text::ByteToMapped(b));
    token_ids.emplace(tokens.back(), i);
  }

  // Word counts.
  std::unordered_map<std::string, int64_t> word_counts;
  ForEachNonSpecialSegment(corpus, special_tokens, [&](std::string_view seg) {
    // As in Tokenizer::Encode, the gaps between matches (only invalid UTF-8 can fall there) are
    // words too.
    size_t prev = 0;
    for (const auto& [b, e] : re->FindAll(seg)) {
      if (b > prev) ++word_counts[std::string(seg.substr(prev, b - prev))];
      ++word_counts[std::string(seg.substr(b, e - b))];
      prev = e;
    }
    if (seg.size() > prev) ++word_counts[std::string(seg.substr(prev))];
  });
  std::vector<std::pair<std::string, int64_t>> sorted_words(word_counts.begin(), word_counts.end());
  std::sort(sorted_words.begin(), sorted_words.end());
  std::vector<Word> words;
  words.reserve(sorted_words.size());
  for (const auto& [w, c] : sorted_words) {
    Word word;
    word.count = c;
    for (char ch : w) word.syms.push_back(byte_id[static_cast<uint8_t>(ch)]);
    words.push_back(std::move(word));
  }

  // Pair counts and where each pair occurs.
  std::unordered_map<uint64_t, int64_t> pair_counts;
  std::unordered_map<uint64_t, std::vector<uint32_t>> pair_words;
  for (uint32_t wi = 0; wi < words.size(); ++wi) {
    const Word& w = words[wi];
    for (size_t k = 0; k + 1 < w.syms.size(); ++k) {
      const uint64_t key = PairKey(w.syms[k], w.syms[k + 1]);
      pair_counts[key] += w.count;
      pair_words[key].push_back(wi);
    }
  }

  struct Entry {
    int64_t count;
    uint64_t pair;
  };
  // Max-heap: larger count first, then the smaller (left, right) token strings.
  auto worse = [&tokens](const Entry& x, const Entry& y) {
    if (x.count != y.count) return x.count < y.count;
    const std::string& xl = tokens[PairLeft(x.pair)];
    const std::string& yl = tokens[PairLeft(y.pair)];
    if (xl != yl) return xl > yl;
    return tokens[PairRight(x.pair)] > tokens[PairRight(y.pair)];
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(worse)> heap(worse);
  for (const auto& [key, count] : pair_counts) {
    if (count > 0) heap.push({count, key});
  }

  const size_t max_model_tokens = static_cast<size_t>(vocab_size - num_specials);
  std::vector<std::pair<int32_t, int32_t>> merges;
  std::unordered_map<uint64_t, int64_t> delta;
  while (tokens.size() < max_model_tokens && !heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    auto pc = pair_counts.find(top.pair);
    const int64_t current = pc == pair_counts.end() ? 0 : pc->second;
    if (current <= 0) continue;
    if (current != top.count) {
      heap.push({current, top.pair});
      continue;
    }
    const int32_t a = PairLeft(top.pair);
    const int32_t b = PairRight(top.pair);
    const std::string merged = tokens[a] + tokens[b];
    int32_t nid;
    if (auto it = token_ids.find(merged); it != token_ids.end()) {
      nid = it->second;
    } else {
      nid = static_cast<int32_t>(tokens.size());
      tokens.push_back(merged);
      token_ids.emplace(merged, nid);
    }
    merges.emplace_back(a, b);

    std::vector<uint32_t> where = std::move(pair_words[top.pair]);
    pair_words.erase(top.pair);
    std::sort(where.begin(), where.end());
    where.erase(std::unique(where.begin(), where.end()), where.end());
    delta.clear();
    for (uint32_t wi : where) {
      Word& w = words[wi];
      const std::vector<int32_t>& s = w.syms;
      bool found = false;
      for (size_t k = 0; k + 1 < s.size(); ++k) {
        if (s[k] == a && s[k + 1] == b) {
          found = true;
          break;
        }
      }
      if (!found) continue;
      std::vector<int32_t> out;
      out.reserve(s.size());
      const int64_t c = w.count;
      for (size_t k = 0; k < s.size();) {
        if (k + 1 < s.size() && s[k] == a && s[k + 1] == b) {
          if (!out.empty()) {
            delta[PairKey(out.back(), a)] -= c;
            delta[PairKey(out.back(), nid)] += c;
            pair_words[PairKey(out.back(), nid)].push_back(wi);
          }
          if (k + 2 < s.size()) {
            delta[PairKey(b, s[k + 2])] -= c;
            delta[PairKey(nid, s[k + 2])] += c;
            pair_words[PairKey(nid, s[k + 2])].push_back(wi);
          }
          delta[top.pair] -= c;
          out.push_back(nid);
          k += 2;
        } else {
          out.push_back(s[k]);
          ++k;
        }
      }
      w.syms = std::move(out);
    }
    // Apply the deltas in a fixed order; pairs that grew get a fresh heap entry.
    std::vector<std::pair<uint64_t, int64_t>> changes(delta.begin(), delta.end());
    std::sort(changes.begin(), changes.end());
    for (const auto& [key, d] : changes) {
      if (d == 0) continue;
      int64_t& cnt = pair_counts[key];
      cnt += d;
      if (cnt <= 0) {
        pair_counts.erase(key);
        pair_words.erase(key);
      } else if (d > 0) {
        heap.push({cnt, key});
      }
    }
  }

  // tokenizer.json.
  json vocab = json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = static_cast<int64_t>(i);
  json merges_json = json::array();
  for (const auto& [a, b] : merges) merges_json.push_back(json::array({tokens[a], tokens[b]}));
  json added = json::array();
  for (int i = 0; i < num_specials; ++i) {
    added.push_back({{"id", static_cast<int64_t>(tokens.size()) + i},
                     {"content", special_tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  json byte_level = {{"type", "ByteLevel"},
                     {"add_prefix_space", false},
                     {"trim_offsets", true},
                     {"use_regex", true}};
  json out = {{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", nullptr},
              {"pre_tokenizer", byte_level},
              {"post_processor", nullptr},
              {"decoder", byte_level},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merges_json}}}};
  return out;
}

}  // namespace nw
