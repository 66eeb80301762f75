// NWW01 codec: round trips of every command, and every kind of malformed input is rejected with
// a Status that names the message and field (never a crash).
#include "protocol/messages.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tests/protocol/sample_spec.h"

namespace nw {
namespace {

using json = nlohmann::json;

JobSpec Spec() { return testing_protocol::SampleSpec(); }

JobResult Res() {
  JobResult r;
  r.job_key = Spec().Key();
  r.attempt = 2;
  r.outcome = Outcome::kMiss;
  r.generated_text = "The number is 1234";
  r.expected = "7654321";
  r.needle_token_offset = 1000;
  r.prompt_tokens = 4096;
  r.generated_tokens = 7;
  r.total_ms = 12.5;
  r.worker_id = "w-1";
  r.device = "cpu";
  r.probes.push_back(ProbeSummary{3, 2, 5, 6.5, 0.5, true, 16, {4, 5}, {1, 2, 3}});
  return r;
}

// Frames [""][version][command][payload] built by hand.
zmq::multipart_t Frames(const std::string& payload, uint8_t cmd,
                        const std::string& version = std::string(kProtocolVersion),
                        const std::string& delimiter = "") {
  zmq::multipart_t m;
  m.addstr(delimiter);
  m.addstr(version);
  m.addmem(&cmd, 1);
  m.addstr(payload);
  return m;
}

uint8_t Byte(Command c) { return static_cast<uint8_t>(c); }

// Encodes, then decodes; fails the test on any error.
Message RoundTrip(const Message& in) {
  auto frames = Encode(in);
  EXPECT_TRUE(frames.ok()) << frames.status().ToString();
  EXPECT_EQ(frames->size(), 4u);
  EXPECT_EQ((*frames)[0].size(), 0u);
  EXPECT_EQ((*frames)[1].to_string(), "NWW01");
  EXPECT_EQ((*frames)[2].size(), 1u);
  auto out = Decode(*frames);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(CommandOf(*out), CommandOf(in));
  return *out;
}

// Decodes frames that must be rejected; returns the error message.
std::string Rejected(const zmq::multipart_t& frames, const CodecLimits& limits = {}) {
  auto out = Decode(frames, limits);
  EXPECT_FALSE(out.ok());
  if (out.ok()) return "";
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  return out.status().message();
}

std::string RejectedPayload(Command c, const json& payload) {
  return Rejected(Frames(payload.dump(), Byte(c)));
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "in: " << (haystack)

json ValidReady() {
  return json{{"worker_id", "w1"},
              {"host", "box"},
              {"slots", 2},
              {"capabilities", {{"backends", {"cpu", "cpu-paged"}}, {"device", "cpu"}}},
              {"held", json::array({{{"job_key", "k"}, {"attempt", 1}}})}};
}

json ValidJob() {
  return json{{"job_key", Spec().Key()},
              {"attempt", 1},
              {"lease_ms", 1000},
              {"lease_expires_wall_ms", 5},
              {"spec", Spec().ToJson()}};
}

TEST(MessagesTest, CommandNames) {
  EXPECT_EQ(CommandName(Command::kReady), "READY");
  EXPECT_EQ(CommandName(Command::kJob), "JOB");
  EXPECT_EQ(CommandName(Command::kResult), "RESULT");
  EXPECT_EQ(CommandName(Command::kAck), "ACK");
  EXPECT_EQ(CommandName(Command::kHeartbeat), "HEARTBEAT");
  EXPECT_EQ(CommandName(Command::kDisconnect), "DISCONNECT");
  EXPECT_EQ(CommandName(uint8_t{0x2a}), "UNKNOWN(0x2a)");
  EXPECT_TRUE(IsWorkerCommand(Command::kResult));
  EXPECT_FALSE(IsWorkerCommand(Command::kJob));
  EXPECT_TRUE(IsCoordinatorCommand(Command::kAck));
  EXPECT_FALSE(IsCoordinatorCommand(Command::kReady));
  EXPECT_TRUE(IsWorkerCommand(Command::kHeartbeat) && IsCoordinatorCommand(Command::kHeartbeat));
}

TEST(MessagesTest, ReadyRoundTrip) {
  ReadyMsg in;
  in.worker_id = "host-1:gpu0";
  in.host = "host-1";
  in.slots = 3;
  in.capabilities = {{"backends", {"cuda", "cuda-paged"}}, {"device", "NVIDIA H200"}};
  in.held = {{"k1", 2}, {"k2", 7}};
  auto out = std::get<ReadyMsg>(RoundTrip(in));
  EXPECT_EQ(out.worker_id, in.worker_id);
  EXPECT_EQ(out.host, in.host);
  EXPECT_EQ(out.slots, 3);
  EXPECT_EQ(out.capabilities, in.capabilities);
  EXPECT_EQ(out.held, in.held);
}

TEST(MessagesTest, JobRoundTrip) {
  JobMsg in;
  in.job_key = Spec().Key();
  in.attempt = 4;
  in.lease_ms = 7'200'000;
  in.lease_expires_wall_ms = 1'800'000'000'000;
  in.spec = Spec();
  auto out = std::get<JobMsg>(RoundTrip(in));
  EXPECT_EQ(out.job_key, in.job_key);
  EXPECT_EQ(out.attempt, 4);
  EXPECT_EQ(out.lease_ms, in.lease_ms);
  EXPECT_EQ(out.lease_expires_wall_ms, in.lease_expires_wall_ms);
  EXPECT_EQ(out.spec.ToJson(), in.spec.ToJson());
  EXPECT_EQ(out.spec.Key(), in.job_key);
}

TEST(MessagesTest, ResultRoundTrip) {
  ResultMsg in{Res()};
  auto out = std::get<ResultMsg>(RoundTrip(in));
  EXPECT_EQ(out.result.ToJson(), in.result.ToJson());
}

TEST(MessagesTest, ResultWithInvalidUtf8IsEncodedNotThrown) {
  ResultMsg in{Res()};
  in.result.generated_text = std::string("ok \xe2\x82", 5);  // a cut multi-byte character
  auto out = std::get<ResultMsg>(RoundTrip(in));
  EXPECT_EQ(out.result.generated_text.substr(0, 3), "ok ");
}

TEST(MessagesTest, AckRoundTrip) {
  for (AckStatus s :
       {AckStatus::kCommitted, AckStatus::kDuplicate, AckStatus::kRejected, AckStatus::kFailed}) {
    AckMsg in{"key", 3, s, "because"};
    auto out = std::get<AckMsg>(RoundTrip(in));
    EXPECT_EQ(out.job_key, "key");
    EXPECT_EQ(out.attempt, 3);
    EXPECT_EQ(out.status, s);
    EXPECT_EQ(out.reason, "because");
    EXPECT_EQ(ParseAckStatus(AckStatusName(s)).value(), s);
  }
  EXPECT_FALSE(ParseAckStatus("maybe").ok());
}

TEST(MessagesTest, HeartbeatAndDisconnectRoundTrip) {
  RoundTrip(HeartbeatMsg{});
  auto d = std::get<DisconnectMsg>(RoundTrip(DisconnectMsg{"campaign finished", false}));
  EXPECT_EQ(d.reason, "campaign finished");
  EXPECT_FALSE(d.reconnect);
  d = std::get<DisconnectMsg>(RoundTrip(DisconnectMsg{"who are you", true}));
  EXPECT_TRUE(d.reconnect);
}

TEST(MessagesTest, HeartbeatPayloadIsAnEmptyObjectAndExtraFieldsAreIgnored) {
  auto f = Encode(HeartbeatMsg{});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)[3].to_string(), "{}");
  json ready = ValidReady();
  ready["future_field"] = 1;
  EXPECT_TRUE(Decode(Frames(ready.dump(), Byte(Command::kReady))).ok());
}

TEST(MessagesTest, WrongFrameCount) {
  zmq::multipart_t none;
  EXPECT_HAS(Rejected(none), "expected 4 frames");
  EXPECT_HAS(Rejected(none), "got 0");
  zmq::multipart_t three;
  three.addstr("");
  three.addstr("NWW01");
  three.addstr("\x05");
  EXPECT_HAS(Rejected(three), "got 3");
  zmq::multipart_t five = Frames("{}", Byte(Command::kHeartbeat));
  five.addstr("extra");
  EXPECT_HAS(Rejected(five), "got 5");
  // A REQ-style or identity-prefixed message is not mistaken for one.
  zmq::multipart_t with_id = Frames("{}", Byte(Command::kHeartbeat));
  with_id.pushstr("identity");
  EXPECT_HAS(Rejected(with_id), "got 5");
}

TEST(MessagesTest, MissingDelimiter) {
  EXPECT_HAS(Rejected(Frames("{}", Byte(Command::kHeartbeat), "NWW01", "x")), "empty delimiter");
}

TEST(MessagesTest, WrongVersion) {
  EXPECT_HAS(Rejected(Frames("{}", Byte(Command::kHeartbeat), "NWW02")),
             "version frame 'NWW02' is not NWW01");
  EXPECT_HAS(Rejected(Frames("{}", Byte(Command::kHeartbeat), "MDPW01")), "MDPW01");
  EXPECT_HAS(Rejected(Frames("{}", Byte(Command::kHeartbeat), "")), "version frame");
}

TEST(MessagesTest, UnknownCommand) {
  EXPECT_HAS(Rejected(Frames("{}", 0x00)), "unknown command UNKNOWN(0x00)");
  EXPECT_HAS(Rejected(Frames("{}", 0x07)), "unknown command UNKNOWN(0x07)");
  EXPECT_HAS(Rejected(Frames("{}", 0xff)), "UNKNOWN(0xff)");
  zmq::multipart_t two_bytes;
  two_bytes.addstr("");
  two_bytes.addstr("NWW01");
  two_bytes.addstr("\x01\x01");
  two_bytes.addstr("{}");
  EXPECT_HAS(Rejected(two_bytes), "command frame must be 1 byte, got 2");
}

TEST(MessagesTest, BadJson) {
  EXPECT_HAS(Rejected(Frames("{\"worker_id\":", Byte(Command::kReady))),
             "READY: payload is not valid JSON");
  EXPECT_HAS(Rejected(Frames("", Byte(Command::kHeartbeat))), "HEARTBEAT: payload is not valid");
  EXPECT_HAS(Rejected(Frames(std::string("\xff\xfe", 2), Byte(Command::kAck))), "ACK: payload");
  EXPECT_HAS(Rejected(Frames("[1,2]", Byte(Command::kJob))), "JOB: payload must be a JSON object");
  EXPECT_HAS(Rejected(Frames("\"x\"", Byte(Command::kHeartbeat))), "must be a JSON object");
}

TEST(MessagesTest, OversizeFrames) {
  CodecLimits small{64};
  const std::string big(100, 'x');
  EXPECT_HAS(Rejected(Frames("{\"reason\":\"" + big + "\",\"reconnect\":false}",
                             Byte(Command::kDisconnect)),
                      small),
             "frame 3 is");
  EXPECT_HAS(Rejected(Frames("{}", Byte(Command::kHeartbeat), "NWW01" + big), small), "frame 1");
  // Encode refuses too, naming the message.
  auto e = Encode(DisconnectMsg{big, false}, small);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kResourceExhausted);
  EXPECT_HAS(e.status().message(), "DISCONNECT: payload is");
  EXPECT_TRUE(Encode(DisconnectMsg{"short", false}, small).ok());
}

TEST(MessagesTest, ReadyMalformed) {
  EXPECT_TRUE(Decode(Frames(ValidReady().dump(), Byte(Command::kReady))).ok());
  auto without = [](const char* key) {
    json j = ValidReady();
    j.erase(key);
    return j;
  };
  auto with = [](const char* key, json v) {
    json j = ValidReady();
    j[key] = std::move(v);
    return j;
  };
  EXPECT_HAS(RejectedPayload(Command::kReady, without("worker_id")), "READY.worker_id: missing");
  EXPECT_HAS(RejectedPayload(Command::kReady, without("host")), "READY.host: missing");
  EXPECT_HAS(RejectedPayload(Command::kReady, without("slots")), "READY.slots: missing");
  EXPECT_HAS(RejectedPayload(Command::kReady, without("capabilities")),
             "READY.capabilities: missing");
  EXPECT_HAS(RejectedPayload(Command::kReady, without("held")), "READY.held: missing");
  EXPECT_HAS(RejectedPayload(Command::kReady, with("worker_id", 7)),
             "READY.worker_id: must be a string");
  EXPECT_HAS(RejectedPayload(Command::kReady, with("worker_id", "")), "READY.worker_id: length 0");
  EXPECT_HAS(RejectedPayload(Command::kReady, with("worker_id", std::string(300, 'w'))),
             "READY.worker_id: length 300");
  EXPECT_HAS(RejectedPayload(Command::kReady, with("slots", "2")), "READY.slots: must be an int");
  EXPECT_HAS(RejectedPayload(Command::kReady, with("slots", 1.5)), "READY.slots: must be an int");
  EXPECT_HAS(RejectedPayload(Command::kReady, with("slots", true)), "READY.slots: must be an int");
  EXPECT_HAS(RejectedPayload(Command::kReady, with("slots", 0)),
             "READY.slots: 0 outside [1, 1024]");
  EXPECT_HAS(RejectedPayload(Command::kReady, with("slots", 5000)), "READY.slots: 5000 outside");
  EXPECT_HAS(RejectedPayload(Command::kReady, with("slots", 18446744073709551615ull)),
             "READY.slots: out of range");
  EXPECT_HAS(RejectedPayload(Command::kReady, with("capabilities", json::array())),
             "READY.capabilities: must be an object");
  EXPECT_HAS(RejectedPayload(Command::kReady, with("capabilities", json::object())),
             "READY.capabilities.backends: missing");
  EXPECT_HAS(RejectedPayload(Command::kReady, with("capabilities", {{"backends", "cpu"}})),
             "READY.capabilities.backends: must be an array");
  EXPECT_HAS(RejectedPayload(Command::kReady, with("capabilities", {{"backends", {"cpu", 3}}})),
             "READY.capabilities.backends[1]: must be a non-empty string");
  EXPECT_HAS(RejectedPayload(Command::kReady, with("held", json::object())),
             "READY.held: must be an array");
  EXPECT_HAS(RejectedPayload(Command::kReady, with("held", json::array({1}))),
             "READY.held[0]: must be an object");
  EXPECT_HAS(RejectedPayload(Command::kReady, with("held", json::array({{{"job_key", "k"}}}))),
             "READY.held[0].attempt: missing");
  EXPECT_HAS(RejectedPayload(Command::kReady,
                             with("held", json::array({{{"job_key", "k"}, {"attempt", 0}}}))),
             "READY.held[0].attempt: 0 outside");
}

TEST(MessagesTest, JobMalformed) {
  EXPECT_TRUE(Decode(Frames(ValidJob().dump(), Byte(Command::kJob))).ok());
  for (const char* key : {"job_key", "attempt", "lease_ms", "lease_expires_wall_ms", "spec"}) {
    json j = ValidJob();
    j.erase(key);
    EXPECT_HAS(RejectedPayload(Command::kJob, j), std::string("JOB.") + key + ": missing");
  }
  json j = ValidJob();
  j["attempt"] = -1;
  EXPECT_HAS(RejectedPayload(Command::kJob, j), "JOB.attempt: -1 outside");
  j = ValidJob();
  j["lease_ms"] = 0;
  EXPECT_HAS(RejectedPayload(Command::kJob, j), "JOB.lease_ms: 0 outside");
  j = ValidJob();
  j["spec"] = "spec";
  EXPECT_HAS(RejectedPayload(Command::kJob, j), "JOB.spec: must be an object");
  j = ValidJob();
  j["spec"].erase("backend");
  EXPECT_HAS(RejectedPayload(Command::kJob, j), "JOB.spec: job.backend: missing");
  j = ValidJob();
  j["spec"]["precision"] = {{"name", "x"}, {"weights", "fp64"}};
  EXPECT_HAS(RejectedPayload(Command::kJob, j), "JOB.spec");
}

TEST(MessagesTest, ResultMalformed) {
  json valid = {{"result", Res().ToJson()}};
  EXPECT_TRUE(Decode(Frames(valid.dump(), Byte(Command::kResult))).ok());
  EXPECT_HAS(RejectedPayload(Command::kResult, json::object()), "RESULT.result: missing");
  EXPECT_HAS(RejectedPayload(Command::kResult, {{"result", 3}}), "RESULT.result: must be an obj");
  json j = valid;
  j["result"].erase("attempt");
  EXPECT_HAS(RejectedPayload(Command::kResult, j), "RESULT.result.attempt: missing");
  j = valid;
  j["result"]["attempt"] = 0;
  EXPECT_HAS(RejectedPayload(Command::kResult, j), "RESULT.result.attempt: 0 outside");
  j = valid;
  j["result"]["job_key"] = "";
  EXPECT_HAS(RejectedPayload(Command::kResult, j), "RESULT.result.job_key: length 0");
  j = valid;
  j["result"]["outcome"] = "maybe";
  EXPECT_HAS(RejectedPayload(Command::kResult, j),
             "RESULT.result: unknown "
             "outcome 'maybe'");
  j = valid;
  j["result"].erase("total_ms");
  EXPECT_HAS(RejectedPayload(Command::kResult, j), "result.total_ms: missing");
  j = valid;
  j["result"]["probes"] = json::array({{{"layer", 1}}});
  EXPECT_HAS(RejectedPayload(Command::kResult, j), "RESULT.result");
}

TEST(MessagesTest, AckAndDisconnectMalformed) {
  json ack = {{"job_key", "k"}, {"attempt", 1}, {"status", "committed"}, {"reason", ""}};
  EXPECT_TRUE(Decode(Frames(ack.dump(), Byte(Command::kAck))).ok());
  for (const char* key : {"job_key", "attempt", "status", "reason"}) {
    json j = ack;
    j.erase(key);
    EXPECT_HAS(RejectedPayload(Command::kAck, j), std::string("ACK.") + key + ": missing");
  }
  json j = ack;
  j["status"] = "maybe";
  EXPECT_HAS(RejectedPayload(Command::kAck, j), "ACK.status: unknown ack status");
  json disc = {{"reason", "bye"}, {"reconnect", false}};
  EXPECT_TRUE(Decode(Frames(disc.dump(), Byte(Command::kDisconnect))).ok());
  EXPECT_HAS(RejectedPayload(Command::kDisconnect, {{"reason", "bye"}}),
             "DISCONNECT.reconnect: missing");
  EXPECT_HAS(RejectedPayload(Command::kDisconnect, {{"reason", "bye"}, {"reconnect", 1}}),
             "DISCONNECT.reconnect: must be a boolean");
  EXPECT_HAS(RejectedPayload(Command::kDisconnect, {{"reconnect", true}}),
             "DISCONNECT.reason: missing");
}

// Random frames and random mutations of valid messages: Decode returns, it never throws.
TEST(MessagesTest, FuzzNeverThrows) {
  std::mt19937 rng(12345);
  std::vector<std::string> seeds;
  for (const Message& m :
       std::vector<Message>{ReadyMsg{"w", "h", 1, {{"backends", {"cpu"}}}, {}},
                            JobMsg{Spec().Key(), 1, 10, 0, Spec()}, ResultMsg{Res()},
                            AckMsg{"k", 1, {}, ""}, HeartbeatMsg{}, DisconnectMsg{"x", true}}) {
    seeds.push_back(PayloadOf(m).dump());
  }
  int accepted = 0;
  for (int i = 0; i < 5000; ++i) {
    std::string payload = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !payload.empty(); ++e) {
      const size_t at = rng() % payload.size();
      switch (rng() % 3) {
        case 0:
          payload[at] = static_cast<char>(rng() % 256);
          break;
        case 1:
          payload.erase(at, 1 + rng() % 8);
          break;
        default:
          payload.insert(at, 1, "{}[]\",:0-e"[rng() % 10]);
      }
    }
    const uint8_t cmd = static_cast<uint8_t>(rng() % 8);
    auto out = Decode(Frames(payload, cmd));
    if (out.ok()) ++accepted;
  }
  EXPECT_LT(accepted, 5000);
}

// Issue 19: peer strings are made safe for log lines.
TEST(MessagesTest, LogSafeEscapesControlBytesAndCuts) {
  EXPECT_EQ(LogSafe("worker-1"), "worker-1");
  EXPECT_EQ(LogSafe("a\nb\r\x1b[2J\x7f"), "a\\x0ab\\x0d\\x1b[2J\\x7f");
  EXPECT_EQ(LogSafe(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(LogSafe("häß"), "häß");  // UTF-8 stays readable
  EXPECT_EQ(LogSafe(std::string(10, 'x'), 4), "xxxx...(10 bytes)");
}

// Issue 19: READY capabilities are bounded as a whole (they are stored and shown).
TEST(MessagesTest, ReadyCapabilitiesAreBoundedInSize) {
  json ready = ValidReady();
  ready["capabilities"]["notes"] = std::string(kMaxCapabilityBytes, 'n');
  EXPECT_HAS(RejectedPayload(Command::kReady, ready), "READY.capabilities: ");
  EXPECT_HAS(RejectedPayload(Command::kReady, ready), "-byte limit");
  ready["capabilities"]["notes"] = std::string(1000, 'n');
  EXPECT_TRUE(Decode(Frames(ready.dump(), Byte(Command::kReady))).ok());
}

// Issue 19: a result is checked for plausibility before anything is written.
TEST(MessagesTest, ResultBoundsAndPlausibility) {
  const JobSpec spec = Spec();
  EXPECT_TRUE(CheckResultBounds(Res()).ok()) << CheckResultBounds(Res()).ToString();
  auto check = [](const std::function<void(JobResult&)>& edit, const JobSpec* sp = nullptr) {
    JobResult r = Res();
    edit(r);
    const Status st = CheckResultBounds(r, sp);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    return st.message();
  };
  EXPECT_HAS(check([](JobResult& r) { r.prompt_tokens = -1; }), "result.prompt_tokens");
  EXPECT_HAS(check([](JobResult& r) { r.generated_tokens = -1; }), "result.generated_tokens");
  EXPECT_HAS(check([](JobResult& r) { r.needle_token_offset = -2; }), "result.needle_token_offset");
  EXPECT_HAS(check([](JobResult& r) { r.prefill_ms = std::nan(""); }), "result.prefill_ms");
  EXPECT_HAS(check([](JobResult& r) { r.total_ms = -1; }), "result.total_ms");
  EXPECT_HAS(check([](JobResult& r) { r.decode_ms = 1e300; }), "result.decode_ms");
  EXPECT_HAS(
      check([](JobResult& r) { r.generated_text = std::string(kMaxResultTextBytes + 1, 'a'); }),
      "result.generated_text");
  EXPECT_HAS(check([](JobResult& r) { r.error_code = "not_a_code"; }), "result.error_code");
  EXPECT_HAS(check([](JobResult& r) { r.probes[0].layer = -1; }), "result.probes[0].layer");
  EXPECT_HAS(check([](JobResult& r) { r.probes[0].layer = 100000; }), "result.probes[0].layer");
  EXPECT_HAS(check([](JobResult& r) { r.probes[0].in_topk_fraction = 1.5; }), "in_topk_fraction");
  EXPECT_HAS(check([](JobResult& r) { r.probes[0].ranks = {1, 2, 3}; }), "probes[0].ranks");
  EXPECT_HAS(check([](JobResult& r) { r.probes[0].ranks = {-7, 1}; }), "probes[0].ranks");
  EXPECT_HAS(check([](JobResult& r) { r.probes[0].topk_last.assign(17, 1); }),
             "probes[0].topk_last");
  EXPECT_HAS(check([](JobResult& r) { r.probes.resize(kMaxProbes + 1); }), "result.probes");
  JobSpec no_probe = spec;
  no_probe.probe = false;
  EXPECT_HAS(check([](JobResult&) {}, &no_probe), "did not ask for probes");
  // Issue 20: a streamed result's latency figures are bounded like the other timings, and
  // travel as "stream" only when set.
  EXPECT_HAS(check([](JobResult& r) {
               r.stream = StreamTiming{-1, 0, 0, 0, 1};
             }),
             "result.stream.ttft_ms");
  EXPECT_HAS(check([](JobResult& r) {
               r.stream = StreamTiming{1, 0, 0, std::nan(""), 1};
             }),
             "result.stream.itl_p95_ms");
  EXPECT_HAS(check([](JobResult& r) {
               r.stream = StreamTiming{1, 0, 0, 0, -1};
             }),
             "result.stream.events");
  JobResult streamed = Res();
  EXPECT_FALSE(streamed.ToJson().contains("stream"));
  streamed.stream = StreamTiming{12.5, 2, 1.5, 4, 3};
  EXPECT_TRUE(CheckResultBounds(streamed).ok());
  auto back = JobResult::FromJson(streamed.ToJson());
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->stream == streamed.stream);
  json no_events = streamed.ToJson();
  no_events["stream"].erase("events");
  EXPECT_HAS(JobResult::FromJson(no_events).status().message(), "result.stream.events: missing");
  JobSpec probing = spec;
  probing.probe = true;
  probing.context_length = 2;
  EXPECT_HAS(check([](JobResult& r) { r.probes[0].positions = 5; }, &probing),
             "5 positions for a prompt of 2 tokens");
}

// Issue 19: a layer probed twice is refused; with the model's layers known, so are layers the
// model does not have and layers without an indexer.
TEST(MessagesTest, ProbeLayersMustExistInTheModel) {
  JobResult r;
  r.job_key = "k";
  r.attempt = 1;
  r.probes = {ProbeSummary{1, 1, 0, 0, 1, true, 1, {0}, {0}},
              ProbeSummary{3, 1, 0, 0, 1, true, 1, {0}, {0}}};
  EXPECT_TRUE(CheckResultBounds(r).ok());
  const ModelProbeLayers model{4, {1, 3}};
  EXPECT_TRUE(CheckResultBounds(r, nullptr, &model).ok());
  const ModelProbeLayers shallow{3, {1}};
  EXPECT_EQ(CheckResultBounds(r, nullptr, &shallow).message(),
            "result.probes[1].layer: layer 3 does not exist in the model (3 layers)");
  const ModelProbeLayers other{4, {1, 2}};
  EXPECT_EQ(CheckResultBounds(r, nullptr, &other).message(),
            "result.probes[1].layer: layer 3 has no indexer in the model (indexer layers: 1, 2)");
  r.probes[1].layer = 1;
  EXPECT_EQ(CheckResultBounds(r).message(), "result.probes[1].layer: layer 1 is probed twice");
}

// Issue 19: an integer too large for its field is refused, never wrapped into a small one.
TEST(MessagesTest, ResultIntegersThatDoNotFitTheirFieldAreRefused) {
  json payload = {{"result", Res().ToJson()}};
  payload["result"]["probes"][0]["layer"] = 4294967299LL;  // 2^32 + 3 would wrap to 3
  EXPECT_HAS(RejectedPayload(Command::kResult, payload), "probe.layer: 4294967299 does not fit");
  payload = {{"result", Res().ToJson()}};
  payload["result"]["prompt_tokens"] = 18446744073709551615ull;
  EXPECT_HAS(RejectedPayload(Command::kResult, payload), "result.prompt_tokens");
}

TEST(MessagesTest, HexId) {
  zmq::message_t id("\x00\x01\xab", 3);
  EXPECT_EQ(HexId(id), "0001ab");
}

}  // namespace
}  // namespace nw
