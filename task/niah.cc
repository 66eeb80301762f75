// NIAH prompt builder. The prompt is a concatenation of independently tokenized segments:
//
//   [instruction] [haystack sentences ... needle(s) ... sentences] [filler] [question]
//
// so its token count is the sum of the segments' counts and every needle's token span is known.
// Each haystack region is filled greedily with generator sentences up to its exact token budget;
// what is left (less than one sentence) is filled with a single-token filler segment repeated.
//
// Positions. A fraction f puts the target needle at the sentence boundary nearest f x H, where H
// is the haystack's token count (needles excluded). A negative -N makes the target needle end N
// tokens before the end of the prompt: the haystack is then two regions, one before the needle
// and one of exactly N - |question| tokens after it, and any other needles go into the first.
// niah-multikey scatters the distractors at seeded fractions; niah-repeat spaces the other copies
// evenly, 1/repeats of the haystack apart, continuing (and wrapping) from the target's fraction.
#include "task/niah.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/sha256.h"
#include "task/niah_generators.h"
#include "task/rng.h"

namespace nw {
namespace {

using text::DeriveSeed;
using text::HaystackSentence;
using text::Rng;
using text::SentenceGenerator;

constexpr uint64_t kKeyStream = 1;
constexpr uint64_t kHaystackStream = 2;
constexpr uint64_t kPlacementStream = 3;
constexpr uint64_t kCorpusStream = 10;

// After the first sentence that does not fit a region, this many more are tried before the rest
// of the budget goes to filler.
constexpr int kFitRetries = 12;

// Segments that encode to exactly one token are used as filler, the first that does.
constexpr const char* kFillerCandidates[] = {" .", ".", " ", "\n"};

class SegmentEncoder {
 public:
  explicit SegmentEncoder(const Tokenizer& tok) : tok_(tok) {}
  const std::vector<int32_t>& Encode(const std::string& s) {
    auto it = cache_.find(s);
    if (it == cache_.end()) it = cache_.emplace(s, tok_.Encode(s)).first;
    return it->second;
  }

 private:
  const Tokenizer& tok_;
  std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

enum class SegmentKind { kText, kTargetNeedle, kOtherNeedle };

struct Segment {
  std::string text;
  std::vector<int32_t> tokens;
  SegmentKind kind = SegmentKind::kText;
};

struct Filler {
  std::string text;
  int32_t id = 0;
};

Result<Filler> FindFiller(SegmentEncoder& enc) {
  for (const char* c : kFillerCandidates) {
    const std::vector<int32_t>& ids = enc.Encode(c);
    if (ids.size() == 1) return Filler{c, ids[0]};
  }
  return Status::FailedPrecondition(
      "NIAH: the tokenizer encodes none of \" .\", \".\", \" \", \"\\n\" as a single token, so "
      "prompts cannot be padded to an exact length");
}

// Sentences from `gen` totalling exactly `budget` tokens, the remainder as filler at the end.
std::vector<Segment> FillRegion(SentenceGenerator& gen, SegmentEncoder& enc, const Filler& filler,
                                int64_t budget) {
  std::vector<Segment> items;
  int64_t used = 0;
  int misses = 0;
  while (used < budget && misses <= kFitRetries) {
    HaystackSentence s = gen.Next();
    std::string t = s.Text();
    const std::vector<int32_t>& ids = enc.Encode(t);
    if (ids.empty()) continue;
    if (used + static_cast<int64_t>(ids.size()) > budget) {
      ++misses;
      continue;
    }
    used += static_cast<int64_t>(ids.size());
    items.push_back({std::move(t), ids, SegmentKind::kText});
  }
  if (used < budget) {
    Segment f;
    const int64_t gap = budget - used;
    f.tokens.assign(static_cast<size_t>(gap), filler.id);
    for (int64_t i = 0; i < gap; ++i) f.text += filler.text;
    items.push_back(std::move(f));
  }
  return items;
}

// Index of the boundary (0..items.size()) whose token offset is nearest `target` (ties: earlier).
size_t NearestBoundary(const std::vector<Segment>& items, double target) {
  size_t best = 0;
  double best_dist = std::abs(target);
  int64_t offset = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    offset += static_cast<int64_t>(items[i].tokens.size());
    const double d = std::abs(static_cast<double>(offset) - target);
    if (d < best_dist) {
      best_dist = d;
      best = i + 1;
    }
  }
  return best;
}

struct Placement {
  size_t boundary;
  double order;  // position key among needles at the same boundary
  int seq;       // 0 = target
  const Segment* needle;
};

// Appends `items` with the needles of `placements` at their boundaries; records the target.
void EmitRegion(const std::vector<Segment>& items, std::vector<Placement> placements,
                std::vector<const Segment*>* out, const Segment** target) {
  std::sort(placements.begin(), placements.end(), [](const Placement& a, const Placement& b) {
    if (a.boundary != b.boundary) return a.boundary < b.boundary;
    if (a.order != b.order) return a.order < b.order;
    return a.seq < b.seq;
  });
  size_t p = 0;
  for (size_t b = 0; b <= items.size(); ++b) {
    while (p < placements.size() && placements[p].boundary == b) {
      out->push_back(placements[p].needle);
      if (placements[p].seq == 0) *target = placements[p].needle;
      ++p;
    }
    if (b < items.size()) out->push_back(&items[b]);
  }
}

std::string Num(int64_t v) { return std::to_string(v); }

}  // namespace

Result<NiahTask> ParseNiahTask(std::string_view name) {
  if (name == "niah-single") return NiahTask::kSingle;
  if (name == "niah-multikey") return NiahTask::kMultikey;
  if (name == "niah-repeat") return NiahTask::kRepeat;
  return Status::InvalidArgument("task: unknown NIAH task '" + std::string(name) +
                                 "' (expected niah-single, niah-multikey or niah-repeat)");
}

Result<NiahHaystack> ParseNiahHaystack(std::string_view name) {
  if (name == "noise") return NiahHaystack::kNoise;
  if (name == "essay") return NiahHaystack::kEssay;
  if (name == "needles") return NiahHaystack::kNeedles;
  return Status::InvalidArgument("haystack: unknown NIAH haystack '" + std::string(name) +
                                 "' (expected noise, essay or needles)");
}

std::string_view NiahTaskName(NiahTask t) {
  switch (t) {
    case NiahTask::kSingle:
      return "niah-single";
    case NiahTask::kMultikey:
      return "niah-multikey";
    case NiahTask::kRepeat:
      return "niah-repeat";
  }
  return "niah-unknown";
}

std::string_view NiahHaystackName(NiahHaystack h) {
  switch (h) {
    case NiahHaystack::kNoise:
      return "noise";
    case NiahHaystack::kEssay:
      return "essay";
    case NiahHaystack::kNeedles:
      return "needles";
  }
  return "unknown";
}

Result<NiahPrompt> BuildNiahPrompt(const Tokenizer& tokenizer, const NiahSpec& spec) {
  // ---- validate the spec ----
  const int64_t length = spec.context_length;
  if (length <= 0) {
    return Status::InvalidArgument("context_length: must be positive, got " + Num(length));
  }
  const double pos = spec.needle_position;
  if (!std::isfinite(pos) || pos > 1.0) {
    return Status::InvalidArgument(
        "needle_position: must be a fraction in [0, 1] or a negative "
        "token count, got " +
        std::to_string(pos));
  }
  const bool from_end = pos < 0;
  if (from_end && (pos != std::floor(pos) || pos < -1e15)) {
    return Status::InvalidArgument(
        "needle_position: a negative position counts whole tokens "
        "from the end, got " +
        std::to_string(pos));
  }
  if (spec.value_digits < 1 || spec.value_digits > 64) {
    return Status::InvalidArgument("value_digits: must be in [1, 64], got " +
                                   std::to_string(spec.value_digits));
  }
  int extras = 0;
  if (spec.task == NiahTask::kMultikey) {
    if (spec.distractors < 0) {
      return Status::InvalidArgument("distractors: must be >= 0, got " +
                                     std::to_string(spec.distractors));
    }
    extras = spec.distractors;
  } else if (spec.task == NiahTask::kRepeat) {
    if (spec.repeats < 1) {
      return Status::InvalidArgument("repeats: must be >= 1, got " + std::to_string(spec.repeats));
    }
    extras = spec.repeats - 1;
  }

  SegmentEncoder enc(tokenizer);
  NW_ASSIGN_OR_RETURN(Filler filler, FindFiller(enc));

  // ---- keys, values, needles (independent of the length and position) ----
  Rng key_rng(DeriveSeed(spec.seed, kKeyStream));
  std::unordered_set<std::string> used_keys;
  const std::string key = text::NewKey(key_rng, &used_keys);
  const std::string value = text::RandomValue(key_rng, spec.value_digits);
  Segment target{" " + text::NeedleSentence(key, value), {}, SegmentKind::kTargetNeedle};
  target.tokens = enc.Encode(target.text);
  std::vector<Segment> extra_needles;
  extra_needles.reserve(static_cast<size_t>(extras));
  std::unordered_set<std::string> used_values{value};
  for (int i = 0; i < extras; ++i) {
    if (spec.task == NiahTask::kRepeat) {
      extra_needles.push_back(target);
      continue;
    }
    const std::string k = text::NewKey(key_rng, &used_keys);
    std::string v = text::RandomValue(key_rng, spec.value_digits);
    for (int tries = 0; used_values.count(v) > 0 && tries < 100; ++tries) {
      v = text::RandomValue(key_rng, spec.value_digits);
    }
    used_values.insert(v);
    Segment s{" " + text::NeedleSentence(k, v), {}, SegmentKind::kOtherNeedle};
    s.tokens = enc.Encode(s.text);
    extra_needles.push_back(std::move(s));
  }

  Segment prefix{text::NiahPrefix(), {}, SegmentKind::kText};
  prefix.tokens = enc.Encode(prefix.text);
  Segment question{text::NiahQuestion(key), {}, SegmentKind::kText};
  question.tokens = enc.Encode(question.text);

  const int64_t n_prefix = static_cast<int64_t>(prefix.tokens.size());
  const int64_t n_question = static_cast<int64_t>(question.tokens.size());
  const int64_t n_target = static_cast<int64_t>(target.tokens.size());
  int64_t n_extras = 0;
  for (const Segment& s : extra_needles) n_extras += static_cast<int64_t>(s.tokens.size());
  const int64_t fixed = n_prefix + n_question + n_target + n_extras;
  if (length < fixed) {
    return Status::InvalidArgument("context_length: " + Num(length) + " tokens is too short for " +
                                   std::string(NiahTaskName(spec.task)) + ": instruction (" +
                                   Num(n_prefix) + ") + needles (" + Num(n_target + n_extras) +
                                   ") + question (" + Num(n_question) + ") need at least " +
                                   Num(fixed) + " tokens");
  }
  const int64_t haystack_tokens = length - fixed;

  // ---- haystack generator ----
  const uint64_t hay_seed = DeriveSeed(spec.seed, kHaystackStream);
  std::unique_ptr<SentenceGenerator> gen;
  switch (spec.haystack) {
    case NiahHaystack::kNoise:
      gen = text::MakeNoiseGenerator(hay_seed);
      break;
    case NiahHaystack::kEssay:
      gen = text::MakeEssayGenerator(hay_seed);
      break;
    case NiahHaystack::kNeedles:
      gen = text::MakeNeedleGenerator(hay_seed, used_keys, value, spec.value_digits);
      break;
  }

  // Desired haystack fractions of the extra needles (target at fraction `anchor`).
  Rng place_rng(DeriveSeed(spec.seed, kPlacementStream));
  auto extra_fraction = [&](int i, double anchor) {
    if (spec.task == NiahTask::kRepeat) {
      const double g = anchor + static_cast<double>(i + 1) / static_cast<double>(spec.repeats);
      return g - std::floor(g);
    }
    return place_rng.Unit();
  };

  std::vector<Segment> region_a;
  std::vector<Segment> region_b;
  std::vector<Placement> placements;
  if (!from_end) {
    region_a = FillRegion(*gen, enc, filler, haystack_tokens);
    const double h = static_cast<double>(haystack_tokens);
    placements.push_back({NearestBoundary(region_a, pos * h), pos, 0, &target});
    for (int i = 0; i < extras; ++i) {
      const double g = extra_fraction(i, pos);
      placements.push_back({NearestBoundary(region_a, g * h), g, i + 1, &extra_needles[i]});
    }
  } else {
    const int64_t n_from_end = static_cast<int64_t>(-pos);
    if (n_from_end < n_question) {
      return Status::InvalidArgument(
          "needle_position: " + Num(-n_from_end) + " would put the needle inside the question (" +
          Num(n_question) + " tokens); use " + Num(-n_question) + " or less");
    }
    const int64_t before = length - n_from_end - n_target - n_prefix - n_extras;
    if (before < 0) {
      return Status::InvalidArgument(
          "needle_position: " + Num(-n_from_end) +
          " leaves no room for the instruction and the "
          "other needles before the needle; context_length must be at least " +
          Num(length - before));
    }
    region_a = FillRegion(*gen, enc, filler, before);
    region_b = FillRegion(*gen, enc, filler, n_from_end - n_question);
    placements.push_back({region_a.size(), 2.0, 0, &target});
    const double h = static_cast<double>(before);
    for (int i = 0; i < extras; ++i) {
      const double g = extra_fraction(i, 1.0);
      placements.push_back({NearestBoundary(region_a, g * h), g, i + 1, &extra_needles[i]});
    }
  }

  // ---- assemble ----
  std::vector<const Segment*> order;
  order.push_back(&prefix);
  const Segment* target_seg = nullptr;
  EmitRegion(region_a, std::move(placements), &order, &target_seg);
  for (const Segment& s : region_b) order.push_back(&s);
  order.push_back(&question);

  NiahPrompt out;
  out.tokens.reserve(static_cast<size_t>(length));
  for (const Segment* s : order) {
    if (s == target_seg) out.needle_begin = static_cast<int64_t>(out.tokens.size());
    if (s == &question) out.question_begin = static_cast<int64_t>(out.tokens.size());
    out.tokens.insert(out.tokens.end(), s->tokens.begin(), s->tokens.end());
    if (s == target_seg) out.needle_end = static_cast<int64_t>(out.tokens.size());
    if (s->kind != SegmentKind::kText) {
      const int64_t end = static_cast<int64_t>(out.tokens.size());
      out.needles.push_back({end - static_cast<int64_t>(s->tokens.size()), end,
                             s->kind == SegmentKind::kTargetNeedle});
    }
    out.text += s->text;
  }
  if (static_cast<int64_t>(out.tokens.size()) != length || target_seg == nullptr) {
    return Status::Internal("NIAH: built " + Num(static_cast<int64_t>(out.tokens.size())) +
                            " tokens for context_length " + Num(length));
  }
  out.expected = value;
  Sha256 h;
  for (int32_t id : out.tokens) {
    const uint32_t u = static_cast<uint32_t>(id);
    const uint8_t le[4] = {static_cast<uint8_t>(u), static_cast<uint8_t>(u >> 8),
                           static_cast<uint8_t>(u >> 16), static_cast<uint8_t>(u >> 24)};
    h.Update(le, sizeof(le));
  }
  out.prompt_hash = h.HexDigest();
  return out;
}

std::string NiahTokenizerCorpus(uint64_t seed, size_t approx_bytes) {
  Rng rng(DeriveSeed(seed, kCorpusStream));
  std::unique_ptr<SentenceGenerator> noise = text::MakeNoiseGenerator(rng.Next());
  std::unique_ptr<SentenceGenerator> essay = text::MakeEssayGenerator(rng.Next());
  std::string out;
  out.reserve(approx_bytes + 4096);
  while (out.size() < approx_bytes) {
    std::unordered_set<std::string> keys;
    const int digits = rng.Chance(3, 4) ? 7 : 1 + static_cast<int>(rng.Below(12));
    const std::string key = text::NewKey(rng, &keys);
    const std::string value = text::RandomValue(rng, digits);
    switch (rng.Below(4)) {
      case 0: {  // a whole prompt with its answer
        SentenceGenerator& g = rng.Chance(1, 2) ? *noise : *essay;
        const int n = 5 + static_cast<int>(rng.Below(36));
        const int at = static_cast<int>(rng.Below(static_cast<uint64_t>(n) + 1));
        out += text::NiahPrefix();
        for (int i = 0; i <= n; ++i) {
          if (i == at) out += " " + text::NeedleSentence(key, value);
          if (i < n) out += g.Next().Text();
        }
        for (uint64_t i = rng.Below(5); i > 0; --i) out += " .";
        out += text::NiahQuestion(key) + " " + value + ".\n\n";
        break;
      }
      case 1: {  // essay paragraphs
        for (int i = 10 + static_cast<int>(rng.Below(21)); i > 0; --i) out += essay->Next().Text();
        out += "\n\n";
        break;
      }
      case 2: {  // a list of needles, then one question
        std::unique_ptr<SentenceGenerator> needles =
            text::MakeNeedleGenerator(rng.Next(), keys, value, digits);
        out += text::NeedleSentence(key, value);
        for (int i = 5 + static_cast<int>(rng.Below(16)); i > 0; --i) out += needles->Next().Text();
        out += text::NiahQuestion(key) + " " + value + ".\n\n";
        break;
      }
      default: {  // noise
        for (int i = 10 + static_cast<int>(rng.Below(31)); i > 0; --i) out += noise->Next().Text();
        out += "\n\n";
        break;
      }
    }
  }
  return out;
}

}  // namespace nw
