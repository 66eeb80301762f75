// Tokenizer tests: hand-made GPT-2-style and DeepSeek-V3-style tokenizer.json files with
// hand-worked expected ids, round trips, added tokens, BPE model flags and load errors.
#include "engine/text/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/splitmix64.h"
#include "engine/text/byte_level.h"

namespace nw {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

const std::filesystem::path kDataDir = std::filesystem::path(NW_TEST_DATA_DIR) / "tokenizer";

Tokenizer LoadOrDie(const std::string& name) {
  Result<Tokenizer> t = Tokenizer::Load(kDataDir / name);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return Tokenizer();
  return std::move(t).value();
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// ---- byte-level map -------------------------------------------------------------------------

TEST(ByteLevelTest, Gpt2Map) {
  EXPECT_EQ(text::ByteToMapped(' '), "Ġ");
  EXPECT_EQ(text::ByteToMapped('\n'), "Ċ");
  EXPECT_EQ(text::ByteToMapped('A'), "A");
  EXPECT_EQ(text::ByteToCodePoint(0), U'\u0100');
  EXPECT_EQ(text::ByteToCodePoint(0xAD), U'\u0143');  // the last of the 68 remapped bytes
  EXPECT_EQ(text::BytesInMappedOrder()[0], '!');
  EXPECT_EQ(text::BytesInMappedOrder()[188], 0);     // GPT-2: "Ā" is id 188
  EXPECT_EQ(text::BytesInMappedOrder()[220], ' ');   // GPT-2: "Ġ" is id 220
  EXPECT_EQ(text::BytesInMappedOrder()[198], '\n');  // GPT-2: "Ċ" is id 198
  for (int b = 0; b < 256; ++b) {
    const std::string raw(1, static_cast<char>(b));
    EXPECT_EQ(text::UnmapBytes(text::MapBytes(raw)), raw) << b;
  }
  EXPECT_FALSE(text::UnmapBytes("\xe4\xbd\xa0").has_value());  // 你 is not a mapped character
}

TEST(ByteLevelTest, Utf8Validation) {
  EXPECT_TRUE(text::IsValidUtf8("abc\xc3\xa9\xe4\xbd\xa0\xf0\x9f\x98\x80"));
  EXPECT_FALSE(text::IsValidUtf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(text::IsValidUtf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(text::IsValidUtf8("\xf4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(text::IsValidUtf8("\xe4\xbd"));          // truncated
}

// ---- GPT-2 style ----------------------------------------------------------------------------

// gpt2_tiny.json: ids 0..255 are the byte tokens in bytes_to_unicode order (so printable ASCII c
// is c - 33, "Ġ" is 220, "Ċ" 198, "ĉ" 197, "č" 201), 256.. the merges in file order
// (256 Ġt, 257 he, 258 Ġthe, 259 ll, 260 ell, 261 Hell, 262 Hello, 263 Ġw, 264 or, 265 Ġwor,
// 266 Ġworl, 267 Ġworld, 268 at, 269 Ġc, 270 Ġcat, 271 12, 272 123, 273 's, 274 Ġh, 275 Ġhat,
// 276 ĠĠ), then 277 <|endoftext|> (special) and 278 [[note]] (not special).
TEST(TokenizerGpt2Test, HandWorkedEncodings) {
  Tokenizer tok = LoadOrDie("gpt2_tiny.json");
  EXPECT_EQ(tok.vocab_size(), 279);
  const std::vector<Case> cases = {
      // Hello | Ġworld | , | Ġthe | Ġcat | 's | Ġ12345 -> Ġ 123 4 5 | Ġhat | !
      {"Hello world, the cat's 12345 hat!",
       {262, 267, 11, 258, 270, 273, 220, 272, 19, 20, 275, 0}},
      // \s+(?!\S) leaves the last space to the word: Ġ | Ġthe | Ġcat
      {"  the cat", {220, 258, 270}},
      // the -> t he ; "\n\n " is one piece without merges ; Ġcat ; trailing "  " -> ĠĠ
      {"the\n\n  cat  ", {83, 257, 198, 198, 220, 270, 276}},
      {"a<|endoftext|>b", {64, 277, 65}},
      {"x[[note]]y<|endoftext|><|endoftext|>", {87, 278, 88, 277, 277}},
      // digits are one piece: 123 4 5 6 7
      {"1234567", {272, 19, 20, 21, 22}},
      // 你好世界: 12 bytes, no merges
      {"你好世界", {160, 121, 254, 161, 98, 121, 160, 116, 244, 163, 243, 234}},
      // '!!!' is one piece but has no merges here
      {"Hello!!!\n\nWorld", {262, 0, 0, 0, 198, 198, 54, 264, 75, 67}},
      // 😀 = F0 9F 98 80 -> ð Ł ĺ Ģ
      {"😀 ok", {172, 253, 246, 222, 220, 78, 74}},
      {"abc123def", {64, 65, 66, 272, 67, 68, 69}},
      {"\tthe\r\ncat", {197, 83, 257, 201, 198, 66, 268}},
      {"", {}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(tok.Encode(c.text), c.ids) << c.text;
    EXPECT_EQ(tok.Decode(c.ids), c.text) << c.text;
  }
}

TEST(TokenizerGpt2Test, PreTokenizerPieces) {
  Tokenizer tok = LoadOrDie("gpt2_tiny.json");
  EXPECT_THAT(tok.PreTokenize("I'll go  now, ok?\n"),
              ElementsAre("I", "'ll", "Ġgo", "Ġ", "Ġnow", ",", "Ġok", "?", "Ċ"));
}

TEST(TokenizerGpt2Test, TokenLookups) {
  Tokenizer tok = LoadOrDie("gpt2_tiny.json");
  EXPECT_EQ(tok.TokenId("Ġthe"), 258);
  EXPECT_EQ(tok.TokenId("<|endoftext|>"), 277);
  EXPECT_EQ(tok.TokenId("nope"), std::nullopt);
  EXPECT_EQ(tok.IdToToken(262), "Hello");
  EXPECT_EQ(tok.IdToToken(278), "[[note]]");
  EXPECT_EQ(tok.IdToToken(279), std::nullopt);
  EXPECT_TRUE(tok.IsSpecial(277));
  EXPECT_FALSE(tok.IsSpecial(278));
  EXPECT_FALSE(tok.IsSpecial(262));
}

TEST(TokenizerGpt2Test, DecodeKeepsInvalidUtf8AndSkipsUnknownIds) {
  Tokenizer tok = LoadOrDie("gpt2_tiny.json");
  // 0xFF (never valid in UTF-8) and 0xC3 (a lead byte with no continuation); unknown ids skipped.
  const std::vector<int32_t> ids = {
      39, *tok.TokenId(text::MapBytes("\xff")), *tok.TokenId(text::MapBytes("\xc3")), 100000, -1,
      40};
  EXPECT_EQ(tok.Decode(ids), std::string("H\xff\xc3I"));
  // A multi-byte character split across tokens still comes back whole.
  const std::vector<int32_t> euro = tok.Encode("€");
  ASSERT_EQ(euro.size(), 3u);
  EXPECT_EQ(tok.Decode(std::span(euro).subspan(0, 2)) + tok.Decode(std::span(euro).subspan(2)),
            "€");
}

// ---- DeepSeek-V3 style ----------------------------------------------------------------------

// deepseek_tiny.json: the DeepSeek-V3 pre-tokenizer (Split \p{N}{1,3}, Split CJK runs, Split
// the word/punctuation regex, all Isolated, then ByteLevel without prefix space or regex). Merges
// (ids 256..): Ġt he Ġthe Ġc at Ġcat 12 123 45 456 ä½ ä½ł(你) !! !!! ĊĊ 's ll He Hell Hello ĠĠ;
// added tokens 277 <｜begin▁of▁sentence｜>, 278 <｜end▁of▁sentence｜> (special), 279 <think>.
TEST(TokenizerDeepSeekTest, HandWorkedEncodings) {
  Tokenizer tok = LoadOrDie("deepseek_tiny.json");
  EXPECT_EQ(tok.vocab_size(), 280);
  const std::vector<Case> cases = {
      // digits in groups of three from the left: 123 | 456 | 7
      {"1234567", {263, 265, 22}},
      // "12345" -> 123 | 45, with the space before it a piece of its own; 's via the
      // punctuation+letters alternative; " hat" has no merges.
      {"Hello world, the cat's 12345 hat!",
       {275, 220, 86, 78, 81, 75, 67, 11, 258, 261, 271, 220, 263, 264, 220, 71, 260, 0}},
      {"12 345 6789", {262, 220, 18, 264, 220, 21, 22, 23, 24}},
      // CJK run is one piece: 你 merges to one token, 好世界 stay bytes
      {"你好世界", {267, 161, 98, 121, 160, 116, 244, 163, 243, 234}},
      // kana + kanji run, then digits, then a kanji
      {"猫は12匹", {163, 234, 104, 159, 223, 107, 262, 161, 234, 117}},
      // punctuation run takes the newlines with it: !!! | ĊĊ
      {"Hello!!!\n\nWorld", {275, 269, 270, 54, 78, 81, 75, 67}},
      {" !!!\r\n\r\nok", {220, 269, 201, 198, 201, 198, 78, 74}},
      // whitespace then newlines: "  \n\n" -> ĠĠ ĊĊ ; then " " and " y"
      {"x  \n\n  y", {87, 276, 270, 220, 220, 88}},
      {"the\n\n  cat  ", {83, 257, 270, 220, 261, 276}},
      {"  the cat", {220, 258, 261}},
      // emoji: 4 byte tokens
      {"😀 ok", {172, 253, 246, 222, 220, 78, 74}},
      {"abc123def", {64, 65, 66, 263, 67, 68, 69}},
      {"\tthe\r\ncat", {197, 83, 257, 201, 198, 66, 260}},
      {"<｜begin▁of▁sentence｜>Hello<think> the cat<｜end▁of▁sentence｜>",
       {277, 275, 279, 258, 261, 278}},
      {"<｜begin▁of▁sentence｜><｜begin▁of▁sentence｜>", {277, 277}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(tok.Encode(c.text), c.ids) << c.text;
    EXPECT_EQ(tok.Decode(c.ids), c.text) << c.text;
  }
  // A GPT-2 special token means nothing here: it is plain text.
  EXPECT_EQ(tok.Encode("<|endoftext|>").size(), 13u);
}

TEST(TokenizerDeepSeekTest, PreTokenizerPieces) {
  Tokenizer tok = LoadOrDie("deepseek_tiny.json");
  EXPECT_THAT(tok.PreTokenize("(hello) it's 2024年1月!"),
              ElementsAre("(hello", ")", "Ġit", "'s", "Ġ", "202", "4", "å¹´", "1", "æľĪ", "!"));
}

// ---- round trips ----------------------------------------------------------------------------

std::string RandomBytes(uint64_t* state, size_t max_len) {
  auto next = [state]() { return Mix64(*state += kSplitMix64Gamma); };
  static const char* const kPieces[] = {" ",
                                        "  ",
                                        "\n",
                                        "\r\n",
                                        "\t",
                                        "the",
                                        "cat",
                                        "'s",
                                        "12",
                                        "!!",
                                        "你",
                                        "こ",
                                        "😀",
                                        "é",
                                        "<|endoftext|>",
                                        "[[note]]",
                                        "<｜begin▁of▁sentence｜>",
                                        "<think>"};
  const size_t len = next() % (max_len + 1);
  std::string s;
  while (s.size() < len) {
    const uint64_t r = next();
    switch (r % 3) {
      case 0:
        s.push_back(static_cast<char>((r >> 8) & 0xFF));  // any byte, often invalid UTF-8
        break;
      case 1:
        s.push_back(static_cast<char>(32 + (r >> 8) % 95));
        break;
      default:
        s += kPieces[(r >> 8) % (sizeof(kPieces) / sizeof(kPieces[0]))];
    }
  }
  return s;
}

TEST(TokenizerRoundTripTest, RandomByteStrings) {
  for (const char* name : {"gpt2_tiny.json", "deepseek_tiny.json"}) {
    Tokenizer tok = LoadOrDie(name);
    uint64_t state = 12345;
    for (int i = 0; i < 3000; ++i) {
      const std::string s = RandomBytes(&state, 80);
      const std::vector<int32_t> ids = tok.Encode(s);
      ASSERT_EQ(tok.Decode(ids), s) << name << " case " << i;
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
    }
  }
}

TEST(TokenizerRoundTripTest, ConcurrentEncodeMatchesSerial) {
  Tokenizer tok = LoadOrDie("deepseek_tiny.json");
  std::vector<std::string> texts;
  uint64_t state = 99;
  for (int i = 0; i < 200; ++i) texts.push_back(RandomBytes(&state, 200));
  std::vector<std::vector<int32_t>> serial;
  for (const std::string& t : texts) serial.push_back(tok.Encode(t));
  Tokenizer fresh = LoadOrDie("deepseek_tiny.json");  // empty cache: threads race to fill it
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < texts.size(); ++i) {
        const size_t k = (i * 7 + static_cast<size_t>(t) * 13) % texts.size();
        if (fresh.Encode(texts[k]) != serial[k]) ++mismatches[t];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_THAT(mismatches, ElementsAre(0, 0, 0, 0));
}

// ---- model flags and pre-tokenizer options (tokenizers built in the test) --------------------

json MinimalTokenizer() {
  json vocab = json::object();
  for (int i = 0; i < 256; ++i) vocab[text::ByteToMapped(text::BytesInMappedOrder()[i])] = i;
  return {
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
}

std::vector<std::string> Pieces(const json& pre_tokenizer, std::string_view text) {
  json j = MinimalTokenizer();
  j["pre_tokenizer"] = pre_tokenizer;
  Result<Tokenizer> t = Tokenizer::FromJson(j, "test.json");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return {};
  return t->PreTokenize(text);
}

json SplitOn(const std::string& literal, const std::string& behavior, bool invert = false) {
  return {{"type", "Split"},
          {"pattern", {{"String", literal}}},
          {"behavior", behavior},
          {"invert", invert}};
}

TEST(TokenizerPreTokenizerTest, SplitBehaviors) {
  const std::string s = "the-final--countdown";
  EXPECT_THAT(Pieces(SplitOn("-", "Removed"), s), ElementsAre("the", "final", "countdown"));
  EXPECT_THAT(Pieces(SplitOn("-", "Isolated"), s),
              ElementsAre("the", "-", "final", "-", "-", "countdown"));
  EXPECT_THAT(Pieces(SplitOn("-", "MergedWithPrevious"), s),
              ElementsAre("the-", "final-", "-", "countdown"));
  EXPECT_THAT(Pieces(SplitOn("-", "MergedWithNext"), s),
              ElementsAre("the", "-final", "-", "-countdown"));
  EXPECT_THAT(Pieces(SplitOn("-", "Contiguous"), s),
              ElementsAre("the", "-", "final", "--", "countdown"));
  // invert: the non-matches become the delimiters.
  // Each "-" was its own match, so "--" leaves two pieces.
  EXPECT_THAT(Pieces(SplitOn("-", "Removed", /*invert=*/true), s), ElementsAre("-", "-", "-"));
  json regex = {{"type", "Split"},
                {"pattern", {{"Regex", "\\s+"}}},
                {"behavior", "MergedWithPrevious"},
                {"invert", false}};
  EXPECT_THAT(Pieces(regex, "a b  c"), ElementsAre("a ", "b  ", "c"));
}

TEST(TokenizerPreTokenizerTest, DigitsAndByteLevelOptions) {
  json individual = {{"type", "Digits"}, {"individual_digits", true}};
  EXPECT_THAT(Pieces(individual, "ab123c4"), ElementsAre("ab", "1", "2", "3", "c", "4"));
  json grouped = {{"type", "Digits"}, {"individual_digits", false}};
  EXPECT_THAT(Pieces(grouped, "ab123c4"), ElementsAre("ab", "123", "c", "4"));
  json prefix = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_THAT(Pieces(prefix, "hi there"), ElementsAre("Ġhi", "Ġthere"));
  EXPECT_THAT(Pieces(prefix, " hi"), ElementsAre("Ġhi"));
  json no_regex = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  EXPECT_THAT(Pieces(no_regex, "hi there"), ElementsAre("hiĠthere"));
  json seq = {{"type", "Sequence"}, {"pretokenizers", json::array({individual, no_regex})}};
  EXPECT_THAT(Pieces(seq, "x 12"), ElementsAre("xĠ", "1", "2"));
}

TEST(TokenizerModelTest, UnknownTokensByteFallbackAndFuseUnk) {
  json j = MinimalTokenizer();
  j["pre_tokenizer"] = nullptr;
  j["model"]["vocab"] = {{"a", 0}, {"b", 1}, {"ab", 2}, {"<unk>", 3}, {"<0x63>", 4}};
  j["model"]["merges"] = json::array({"a b"});
  j["model"]["unk_token"] = "<unk>";
  j["model"]["byte_fallback"] = true;
  {
    Result<Tokenizer> t = Tokenizer::FromJson(j, "unk.json");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_THAT(t->Encode("abcz"), ElementsAre(2, 4, 3));  // 'c' via <0x63>, 'z' unknown
    EXPECT_THAT(t->Encode("zzab"), ElementsAre(3, 3, 2));
  }
  j["model"]["fuse_unk"] = true;
  {
    Result<Tokenizer> t = Tokenizer::FromJson(j, "unk.json");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_THAT(t->Encode("zzab"), ElementsAre(3, 2));
    EXPECT_THAT(t->Encode("zzczz"), ElementsAre(3, 4, 3));
  }
  j["model"]["byte_fallback"] = false;
  {
    Result<Tokenizer> t = Tokenizer::FromJson(j, "unk.json");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_THAT(t->Encode("abcz"), ElementsAre(2, 3));
  }
}

TEST(TokenizerModelTest, IgnoreMergesAndMergeRanks) {
  json j = MinimalTokenizer();
  j["pre_tokenizer"] = nullptr;
  j["model"]["vocab"] = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}};
  // "b c" outranks "a b": abc -> a bc (no merge a+bc in the list).
  j["model"]["merges"] = json::array({json::array({"b", "c"}), "a b"});
  {
    Result<Tokenizer> t = Tokenizer::FromJson(j, "im.json");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_THAT(t->Encode("abc"), ElementsAre(0, 4));
    EXPECT_THAT(t->Encode("abab"), ElementsAre(3, 3));
  }
  j["model"]["ignore_merges"] = true;
  {
    Result<Tokenizer> t = Tokenizer::FromJson(j, "im.json");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_THAT(t->Encode("abc"), ElementsAre(5));
    EXPECT_THAT(t->Encode("abab"), ElementsAre(3, 3));
  }
}

TEST(TokenizerAddedTokensTest, LongestMatchAndStripping) {
  json j = MinimalTokenizer();
  j["added_tokens"] = json::array(
      {{{"id", 256}, {"content", "<a>"}, {"special", true}},
       {{"id", 257}, {"content", "<a><b>"}, {"special", true}},
       {{"id", 258}, {"content", "[m]"}, {"special", false}, {"lstrip", true}, {"rstrip", true}},
       {{"id", 259}, {"content", "cat"}, {"single_word", true}}});
  Result<Tokenizer> t = Tokenizer::FromJson(j, "added.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_THAT(t->Encode("<a><b><a>"), ElementsAre(257, 256));
  // lstrip/rstrip absorb the surrounding spaces.
  EXPECT_THAT(t->Encode("x  [m]  y"), ElementsAre('x' - 33, 258, 'y' - 33));
  // single_word: only a whole word matches.
  EXPECT_THAT(t->Encode("cat"), ElementsAre(259));
  EXPECT_EQ(t->Encode("cats").size(), 4u);
  EXPECT_EQ(t->Decode(t->Encode("<a><b><a>")), "<a><b><a>");
}

// ---- load errors ----------------------------------------------------------------------------

Status LoadError(const json& j) {
  Result<Tokenizer> t = Tokenizer::FromJson(j, "bad.json");
  EXPECT_FALSE(t.ok());
  return t.status();
}

TEST(TokenizerErrorsTest, MalformedFieldsAreNamed) {
  {
    json j = MinimalTokenizer();
    j["model"].erase("vocab");
    Status s = LoadError(j);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("bad.json: model.vocab"));
  }
  {
    json j = MinimalTokenizer();
    j["model"]["vocab"]["ab"] = 256;
    j["model"]["merges"] = json::array({"a b", "Ġ zz"});
    Status s = LoadError(j);
    EXPECT_THAT(s.message(), HasSubstr("bad.json: model.merges[1]"));
    EXPECT_THAT(s.message(), HasSubstr("'zz' is not in model.vocab"));
  }
  {
    json j = MinimalTokenizer();
    j["model"]["merges"] = json::array({"a b c"});
    EXPECT_THAT(LoadError(j).message(), HasSubstr("model.merges[0]"));
  }
  {
    json j = MinimalTokenizer();
    j["model"]["merges"] = json::array({"a b"});  // "ab" is not in the vocabulary
    EXPECT_THAT(LoadError(j).message(), HasSubstr("merged token 'ab'"));
  }
  {
    json j = MinimalTokenizer();
    j["model"]["vocab"]["dup"] = 5;
    EXPECT_THAT(LoadError(j).message(), HasSubstr("model.vocab: id 5 is used by both"));
  }
  {
    json j = MinimalTokenizer();
    j["model"]["vocab"]["neg"] = -3;
    EXPECT_THAT(LoadError(j).message(), HasSubstr("model.vocab['neg']"));
  }
  {
    json j = MinimalTokenizer();
    j["normalizer"] = {{"type", "NFC"}};
    Status s = LoadError(j);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported);
    EXPECT_THAT(s.message(), HasSubstr("bad.json: normalizer.type: unsupported normalizer 'NFC'"));
  }
  {
    json j = MinimalTokenizer();
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array()}};
    EXPECT_TRUE(Tokenizer::FromJson(j, "ok.json").ok());
  }
  {
    json j = MinimalTokenizer();
    j["model"]["type"] = "WordPiece";
    EXPECT_THAT(LoadError(j).message(), HasSubstr("model.type: unsupported model 'WordPiece'"));
  }
  {
    json j = MinimalTokenizer();
    j["model"]["dropout"] = 0.1;
    EXPECT_THAT(LoadError(j).message(), HasSubstr("model.dropout"));
  }
  {
    json j = MinimalTokenizer();
    j["model"]["fuse_unk"] = "yes";
    EXPECT_THAT(LoadError(j).message(), HasSubstr("model.fuse_unk: expected a boolean"));
  }
  {
    json j = MinimalTokenizer();
    j["model"]["unk_token"] = "<unk>";
    EXPECT_THAT(LoadError(j).message(), HasSubstr("model.unk_token"));
  }
  {
    json j = MinimalTokenizer();
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", json::array({{{"type", "Whitespace"}}})}};
    EXPECT_THAT(LoadError(j).message(),
                HasSubstr("pre_tokenizer.pretokenizers[0].type: unsupported pre-tokenizer"));
  }
  {
    json j = MinimalTokenizer();
    j["pre_tokenizer"] = {
        {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
    EXPECT_THAT(LoadError(j).message(), HasSubstr("pre_tokenizer.pattern.Regex"));
  }
  {
    json j = MinimalTokenizer();
    j["pre_tokenizer"] = {
        {"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", "Sideways"}};
    EXPECT_THAT(LoadError(j).message(),
                HasSubstr("pre_tokenizer.behavior: unknown split behavior 'Sideways'"));
  }
  {
    json j = MinimalTokenizer();
    j["decoder"] = {{"type", "WordPiece"}};
    EXPECT_THAT(LoadError(j).message(), HasSubstr("decoder.type: unsupported decoder"));
  }
  {
    json j = MinimalTokenizer();
    j["added_tokens"] = json::array({{{"id", 300}, {"content", ""}}});
    EXPECT_THAT(LoadError(j).message(), HasSubstr("added_tokens[0].content"));
  }
  {
    json j = MinimalTokenizer();
    j["added_tokens"] = json::array({{{"id", 5}, {"content", "<x>"}}});
    EXPECT_THAT(LoadError(j).message(), HasSubstr("added_tokens[0].id"));
  }
  {
    json j = json::array();
    EXPECT_THAT(LoadError(j).message(), HasSubstr("bad.json"));
  }
}

TEST(TokenizerErrorsTest, LoadNamesTheFile) {
  Result<Tokenizer> missing = Tokenizer::Load("/nonexistent/dir/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/dir/tokenizer.json"));

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("nw_tok_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path bad = dir / "broken.json";
  {
    std::ofstream out(bad);
    out << "{\"model\": {\"vocab\": {\"a\": 0}, ";
  }
  Result<Tokenizer> broken = Tokenizer::Load(bad);
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(broken.status().message(), HasSubstr(bad.string() + ": invalid JSON"));
  const std::filesystem::path wrong = dir / "wrong.json";
  {
    json j = MinimalTokenizer();
    j["normalizer"] = {{"type", "Lowercase"}};
    std::ofstream out(wrong);
    out << j.dump();
  }
  Result<Tokenizer> w = Tokenizer::Load(wrong);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), HasSubstr(wrong.string() + ": normalizer.type"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace nw
