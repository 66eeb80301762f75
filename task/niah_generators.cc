#include "task/niah_generators.h"

#include <utility>

namespace nw::text {
namespace {

// ---- word lists -------------------------------------------------------------------------------

constexpr const char* kKeyAdjectives[] = {
    "abundant", "ancient", "brave",     "bright", "calm",     "clever",  "crimson",  "curious",
    "dusty",    "eager",   "elegant",   "fierce", "fragile",  "gentle",  "gilded",   "golden",
    "hidden",   "hollow",  "humble",    "icy",    "jolly",    "lively",  "lonely",   "lucky",
    "misty",    "modest",  "narrow",    "noble",  "patient",  "plain",   "polished", "proud",
    "quick",    "quiet",   "rapid",     "rustic", "scarlet",  "silent",  "silver",   "sleepy",
    "smooth",   "solemn",  "steady",    "stormy", "sturdy",   "swift",   "tender",   "tiny",
    "velvet",   "vivid",   "wandering", "wary",   "wild",     "wise",    "wooden",   "young",
    "zealous",  "amber",   "bitter",    "bold",   "cheerful", "distant", "faint",    "hasty",
};

constexpr const char* kKeyNouns[] = {
    "anchor",  "apple",  "arrow",    "badger",  "banner",  "barrel",  "beacon",  "bell",
    "blossom", "bridge", "button",   "candle",  "canyon",  "castle",  "cedar",   "comet",
    "compass", "copper", "cottage",  "crane",   "crystal", "dragon",  "ember",   "falcon",
    "feather", "fern",   "fountain", "garden",  "glacier", "harbor",  "hazel",   "heron",
    "island",  "jacket", "kettle",   "lantern", "ledger",  "lemon",   "maple",   "marble",
    "meadow",  "mirror", "needle",   "orchard", "otter",   "paddle",  "pebble",  "pepper",
    "pillow",  "pine",   "planet",   "pocket",  "quarry",  "rabbit",  "raven",   "ribbon",
    "river",   "saddle", "shadow",   "spindle", "sparrow", "thimble", "thunder", "tulip",
    "velvet",  "violin", "walnut",   "whistle", "willow",  "window",  "wizard",  "yarrow",
};

// Noise: RULER's five sentences and seeded variations of each slot.
constexpr const char* kNoiseThings[] = {"grass", "sky",  "sun",   "sea",  "moon", "snow",
                                        "sand",  "leaf", "cloud", "rose", "coal", "river"};
constexpr const char* kNoiseColors[] = {"green", "blue", "yellow", "white", "red",
                                        "black", "grey", "gold",   "brown", "silver"};
constexpr const char* kNoiseGo[] = {"Here we go.", "Here we go again.", "On we go.", "Off we go.",
                                    "Round and round we go."};
constexpr const char* kNoiseBack[] = {"There and back again.", "Back and forth again.",
                                      "Up and down again.", "There and back once more."};

// Essay vocabulary.
constexpr const char* kNouns[] = {
    "farmer",    "engineer",  "teacher",   "merchant", "sailor",     "painter",   "doctor",
    "student",   "writer",    "gardener",  "baker",    "soldier",    "scientist", "musician",
    "carpenter", "child",     "traveler",  "council",  "village",    "city",      "company",
    "library",   "museum",    "river",     "mountain", "forest",     "machine",   "bridge",
    "market",    "harbor",    "school",    "family",   "neighbor",   "stranger",  "committee",
    "workshop",  "orchestra", "newspaper", "kingdom",  "railway",    "factory",   "hospital",
    "garden",    "island",    "valley",    "storm",    "letter",     "journey",   "problem",
    "idea",      "question",  "method",    "theory",   "experiment", "story",     "argument",
    "festival",  "harvest",   "lantern",   "window",   "engine",     "map",       "clock",
    "coin",      "ship",      "road",      "tower",    "wall",       "field",     "well",
    "book",      "song",      "promise",   "decision", "habit",      "season",    "plan",
};
constexpr const char* kAdjectives[] = {
    "old",     "young",     "quiet",    "busy",     "careful",   "ancient",   "modern",
    "small",   "large",     "curious",  "patient",  "famous",    "forgotten", "local",
    "distant", "northern",  "southern", "simple",   "complex",   "strange",   "familiar",
    "honest",  "stubborn",  "generous", "cautious", "ambitious", "tired",     "cheerful",
    "serious", "reliable",  "fragile",  "sturdy",   "bright",    "dim",       "early",
    "late",    "important", "ordinary", "unusual",  "practical", "elegant",   "rough",
    "gentle",  "loud",      "narrow",   "wide",     "hidden",    "open",      "crowded",
    "empty",   "wooden",    "stone",    "golden",   "rusty",     "clever",    "humble",
};
constexpr const char* kVerbs[] = {
    "built",      "found",     "studied",    "repaired",  "described", "carried",  "painted",
    "questioned", "admired",   "ignored",    "measured",  "visited",   "crossed",  "explained",
    "discovered", "protected", "replaced",   "designed",  "followed",  "watched",  "improved",
    "sold",       "bought",    "borrowed",   "returned",  "opened",    "closed",   "cleaned",
    "wrote",      "read",      "remembered", "forgot",    "defended",  "changed",  "planned",
    "finished",   "started",   "shared",     "collected", "organized", "tested",   "praised",
    "noticed",    "counted",   "moved",      "lifted",    "named",     "welcomed", "answered",
    "examined",
};
constexpr const char* kAdverbs[] = {
    "slowly",   "quickly",  "carefully", "quietly",     "eagerly",  "patiently", "rarely",
    "often",    "suddenly", "gladly",    "gently",      "boldly",   "calmly",    "proudly",
    "finally",  "nearly",   "openly",    "barely",      "happily",  "wisely",    "briefly",
    "politely", "secretly", "steadily",  "reluctantly", "honestly", "easily",    "hardly",
};
constexpr const char* kPlaces[] = {
    "in the village",        "near the river",      "at the market",
    "on the hill",           "behind the old mill", "across the valley",
    "in the library",        "by the harbor",       "under the bridge",
    "along the coast",       "inside the workshop", "at the edge of the forest",
    "in the town square",    "beside the railway",  "on the far shore",
    "in a small room",       "outside the school",  "near the gate",
    "in the northern hills", "at the crossroads",   "on the upper floor",
    "in the empty hall",     "beneath the tower",   "beyond the fields",
};
constexpr const char* kTimes[] = {
    "In the morning",
    "Later that year",
    "Long ago",
    "By the evening",
    "During the winter",
    "In the spring",
    "After the storm",
    "Before the festival",
    "At first",
    "Years later",
    "Every autumn",
    "On most days",
    "Within a week",
    "That summer",
    "Once in a while",
    "After a long delay",
    "Some time later",
    "In those days",
    "At the end of the season",
    "Soon after",
};
constexpr const char* kTails[] = {
    "which surprised everyone",         "which changed very little",
    "which nobody had expected",        "which took most of the day",
    "which the neighbors still recall", "which made the work easier",
    "which caused a long argument",     "which seemed wise at the time",
    "which few people understood",      "which was later forgotten",
    "which pleased the whole town",     "which led to a new plan",
};
constexpr const char* kOpinions[] = {
    "It is often said that", "Many believe that", "Some argue that",    "It seems likely that",
    "Few doubt that",        "It is true that",   "Everyone knew that", "The records show that",
};
constexpr const char* kConnectors[] = {"because", "although", "while", "after",
                                       "before",  "since",    "until", "when"};

std::string Capitalize(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}

class NoiseGenerator : public SentenceGenerator {
 public:
  explicit NoiseGenerator(uint64_t seed) : rng_(seed) {}

  HaystackSentence Next() override {
    static constexpr const char* kRuler[] = {"The grass is green.", "The sky is blue.",
                                             "The sun is yellow.", "Here we go.",
                                             "There and back again."};
    const int slot = slot_;
    slot_ = (slot_ + 1) % 5;
    std::string body;
    if (rng_.Chance(1, 2)) {
      body = kRuler[slot];
    } else if (slot < 3) {
      body = std::string("The ") + rng_.Pick(kNoiseThings) + " is " + rng_.Pick(kNoiseColors) + ".";
    } else if (slot == 3) {
      body = rng_.Pick(kNoiseGo);
    } else {
      body = rng_.Pick(kNoiseBack);
    }
    return {" ", std::move(body)};
  }

 private:
  Rng rng_;
  int slot_ = 0;
};

class EssayGenerator : public SentenceGenerator {
 public:
  explicit EssayGenerator(uint64_t seed) : rng_(seed) {}

  HaystackSentence Next() override {
    std::string sep = " ";
    if (left_in_paragraph_ == 0) {
      if (started_) sep = "\n\n";
      left_in_paragraph_ = 3 + static_cast<int>(rng_.Below(5));
    }
    started_ = true;
    --left_in_paragraph_;
    return {std::move(sep), Sentence()};
  }

 private:
  std::string NounPhrase(bool definite) {
    std::string det;
    switch (rng_.Below(4)) {
      case 0:
        det = "the";
        break;
      case 1:
        det = definite ? "the" : "a";
        break;
      case 2:
        det = definite ? "every" : "one";
        break;
      default:
        det = "the";
    }
    std::string np = det + " ";
    if (rng_.Chance(1, 2)) np += std::string(rng_.Pick(kAdjectives)) + " ";
    np += rng_.Pick(kNouns);
    if (det == "a" &&
        (np[2] == 'a' || np[2] == 'e' || np[2] == 'i' || np[2] == 'o' || np[2] == 'u')) {
      np.insert(1, "n");  // "an ancient map"
    }
    return np;
  }

  std::string Clause() {
    return NounPhrase(true) + " " + rng_.Pick(kVerbs) + " " + NounPhrase(false);
  }

  std::string Sentence() {
    switch (rng_.Below(8)) {
      case 0:
        return Capitalize(Clause()) + ".";
      case 1:
        return Capitalize(NounPhrase(true)) + " " + rng_.Pick(kAdverbs) + " " + rng_.Pick(kVerbs) +
               " " + NounPhrase(false) + " " + rng_.Pick(kPlaces) + ".";
      case 2:
        return std::string(rng_.Pick(kTimes)) + ", " + Clause() + ".";
      case 3:
        return Capitalize(Clause()) + " " + rng_.Pick(kConnectors) + " " + Clause() + ".";
      case 4:
        return std::string(rng_.Pick(kOpinions)) + " " + Clause() + ".";
      case 5:
        return Capitalize(Clause()) + " " + rng_.Pick(kPlaces) + ", " + rng_.Pick(kTails) + ".";
      case 6:
        return Capitalize(Clause()) + ", and " + NounPhrase(true) + " " + rng_.Pick(kAdverbs) +
               " " + rng_.Pick(kVerbs) + " " + NounPhrase(false) + ".";
      default:
        return std::string(rng_.Pick(kTimes)) + ", " + Clause() + " " + rng_.Pick(kPlaces) + "; " +
               Clause() + ".";
    }
  }

  Rng rng_;
  int left_in_paragraph_ = 0;
  bool started_ = false;
};

class NeedleGenerator : public SentenceGenerator {
 public:
  NeedleGenerator(uint64_t seed, std::unordered_set<std::string> reserved, std::string avoid,
                  int digits)
      : rng_(seed), used_(std::move(reserved)), avoid_(std::move(avoid)), digits_(digits) {}

  HaystackSentence Next() override {
    const std::string key = NewKey(rng_, &used_);
    std::string value = RandomValue(rng_, digits_);
    while (value == avoid_) value = RandomValue(rng_, digits_);
    return {" ", NeedleSentence(key, value)};
  }

 private:
  Rng rng_;
  std::unordered_set<std::string> used_;
  std::string avoid_;
  int digits_;
};

}  // namespace

std::string NiahPrefix() {
  return "Some special magic numbers are hidden within the following text. Make sure to "
         "memorize them. I will quiz you about the numbers afterwards.\nText:";
}

std::string NeedleSentence(const std::string& key, const std::string& value) {
  return "One of the special magic numbers for " + key + " is: " + value + ".";
}

std::string NiahQuestion(const std::string& key) {
  return "\nWhat is the special magic number for " + key +
         " mentioned in the provided text? The special magic number for " + key +
         " mentioned in the provided text is";
}

std::string RandomValue(Rng& rng, int digits) {
  std::string v;
  for (int i = 0; i < digits; ++i) {
    const uint64_t d = (i == 0 && digits > 1) ? 1 + rng.Below(9) : rng.Below(10);
    v.push_back(static_cast<char>('0' + d));
  }
  return v;
}

std::string NewKey(Rng& rng, std::unordered_set<std::string>* used) {
  for (int attempt = 0;; ++attempt) {
    std::string key;
    if (attempt >= 128) {  // crowded even for three words: four
      key = std::string(rng.Pick(kKeyAdjectives)) + "-" + rng.Pick(kKeyAdjectives) + "-" +
            rng.Pick(kKeyAdjectives) + "-" + rng.Pick(kKeyNouns);
    } else if (attempt >= 64) {  // the pair space is crowded: three words
      key = std::string(rng.Pick(kKeyAdjectives)) + "-" + rng.Pick(kKeyAdjectives) + "-" +
            rng.Pick(kKeyNouns);
    } else if (rng.Chance(1, 4)) {
      key = rng.Pick(kKeyNouns);
    } else {
      key = std::string(rng.Pick(kKeyAdjectives)) + "-" + rng.Pick(kKeyNouns);
    }
    if (used->insert(key).second) return key;
  }
}

std::unique_ptr<SentenceGenerator> MakeNoiseGenerator(uint64_t seed) {
  return std::make_unique<NoiseGenerator>(seed);
}

std::unique_ptr<SentenceGenerator> MakeEssayGenerator(uint64_t seed) {
  return std::make_unique<EssayGenerator>(seed);
}

std::unique_ptr<SentenceGenerator> MakeNeedleGenerator(
    uint64_t seed, std::unordered_set<std::string> reserved_keys, std::string avoid_value,
    int value_digits) {
  return std::make_unique<NeedleGenerator>(seed, std::move(reserved_keys), std::move(avoid_value),
                                           value_digits);
}

}  // namespace nw::text
