// SseDecoder and StreamReader by hand: event framing in pieces of any size (LF, CRLF, CR,
// comments, multi-line data), and the latency figures from given arrival times (no clock).
#include "http/stream_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "http/sse.h"

namespace nw {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using Clock = StreamReader::Clock;

std::vector<std::string> DecodeInPieces(const std::string& body, size_t piece) {
  SseDecoder d;
  std::vector<std::string> events;
  for (size_t i = 0; i < body.size(); i += piece) {
    EXPECT_TRUE(d.Feed(std::string_view(body).substr(i, piece), &events).ok());
  }
  EXPECT_FALSE(d.pending());
  return events;
}

TEST(SseDecoderTest, EventsAreTheSameWhateverThePieces) {
  const std::string body =
      ": a comment\n\ndata: one\n\ndata:two\r\n\r\nevent: x\nid: 3\ndata: a\ndata: b\n\n"
      "data: cr\r\rretry: 5\ndata\n\ndata: [DONE]\n\n";
  const std::vector<std::string> want = {"one", "two", "a\nb", "cr", "", "[DONE]"};
  for (size_t piece : {1, 2, 3, 7, 1000}) {
    EXPECT_EQ(DecodeInPieces(body, piece), want) << "pieces of " << piece;
  }
}

TEST(SseDecoderTest, AnUnfinishedEventIsPendingAndOversizedOnesAreRefused) {
  SseDecoder d;
  std::vector<std::string> events;
  ASSERT_TRUE(d.Feed("data: half", &events).ok());
  EXPECT_TRUE(events.empty());
  EXPECT_TRUE(d.pending());
  SseDecoder small(16);
  EXPECT_EQ(small.Feed("data: " + std::string(32, 'x'), &events).code(),
            StatusCode::kResourceExhausted);
}

std::string Chunk(const std::string& text, const json& finish = nullptr) {
  return "data: " + json{{"choices", {{{"text", text}, {"finish_reason", finish}}}}}.dump() +
         "\n\n";
}

TEST(StreamReaderTest, TheFiguresComeFromTheArrivalTimes) {
  const Clock::time_point t0{};
  auto at = [&](int ms) { return t0 + std::chrono::milliseconds(ms); };
  StreamReader r(ApiKind::kCompletions, t0);
  ASSERT_TRUE(r.Feed(Chunk("") /* nothing yet */, at(5)).ok());
  ASSERT_TRUE(r.Feed(Chunk("a"), at(100)).ok());
  ASSERT_TRUE(r.Feed(Chunk("b"), at(110)).ok());
  ASSERT_TRUE(r.Feed(Chunk("c") + Chunk("d"), at(130)).ok());  // two events in one read
  ASSERT_TRUE(r.Feed(Chunk("e"), at(170)).ok());
  ASSERT_TRUE(r.Feed(Chunk("", "length"), at(180)).ok());
  ASSERT_TRUE(
      r.Feed("data: {\"choices\": [], \"usage\": {\"prompt_tokens\": 9, \"completion_tokens\": 5}}"
             "\n\ndata: [DONE]\n\n",
             at(181))
          .ok());
  auto answer = r.Finish();
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_EQ(answer->text, "abcde");
  EXPECT_EQ(answer->finish_reason, "length");
  EXPECT_EQ(answer->prompt_tokens, 9);
  EXPECT_EQ(answer->completion_tokens, 5);
  EXPECT_EQ(r.event_ms(), (std::vector<double>{100, 110, 130, 130, 170, 180}));
  const StreamTiming t = r.Timing(5);
  EXPECT_EQ(t.events, 6);
  EXPECT_DOUBLE_EQ(t.ttft_ms, 100);
  EXPECT_DOUBLE_EQ(t.tpot_ms, (180.0 - 100.0) / 4);
  // Gaps 10, 20, 0, 40, 10 -> sorted 0 10 10 20 40: p50 = 3rd = 10, p95 = 5th = 40.
  EXPECT_DOUBLE_EQ(t.itl_p50_ms, 10);
  EXPECT_DOUBLE_EQ(t.itl_p95_ms, 40);
  EXPECT_DOUBLE_EQ(r.Timing(1).tpot_ms, 0);
}

TEST(StreamReaderTest, ChatDeltasAndAnEmptyAnswer) {
  const Clock::time_point t0{};
  StreamReader r(ApiKind::kChat, t0);
  const auto delta = [](const json& d, const json& finish = nullptr) {
    return "data: " + json{{"choices", {{{"delta", d}, {"finish_reason", finish}}}}}.dump() +
           "\n\n";
  };
  ASSERT_TRUE(r.Feed(delta({{"role", "assistant"}, {"content", ""}}), t0).ok());
  ASSERT_TRUE(
      r.Feed(delta(json::object(), "stop") + "data: [DONE]\n\n", t0 + std::chrono::milliseconds(42))
          .ok());
  auto answer = r.Finish();
  ASSERT_TRUE(answer.ok());
  EXPECT_EQ(answer->text, "");
  const StreamTiming t = r.Timing(1);
  EXPECT_EQ(t.events, 1);
  EXPECT_DOUBLE_EQ(t.ttft_ms, 42);  // no text: the finish stands in for the first token
  EXPECT_DOUBLE_EQ(t.itl_p95_ms, 0);
}

TEST(StreamReaderTest, MalformedStreamsAreNamed) {
  const Clock::time_point t0{};
  StreamReader no_done(ApiKind::kCompletions, t0);
  ASSERT_TRUE(no_done.Feed(Chunk("x"), t0).ok());
  EXPECT_THAT(no_done.Finish().status().message(), HasSubstr("no data: [DONE]"));
  StreamReader bad_chunk(ApiKind::kCompletions, t0);
  EXPECT_THAT(bad_chunk.Feed("data: {\"choices\": [{\"delta\": {}}]}\n\n", t0).message(),
              HasSubstr("choices[0].text: missing"));
  StreamReader error(ApiKind::kCompletions, t0);
  const Status e = error.Feed("data: {\"error\": {\"message\": \"boom\"}}\n\n", t0);
  EXPECT_EQ(e.code(), StatusCode::kUnavailable);
  EXPECT_THAT(e.message(), HasSubstr("boom"));
}

}  // namespace
}  // namespace nw
