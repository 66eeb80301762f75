// NWC01 control codec: round trips of every request and reply, the optional READY capability
// keys, and malformed input of every kind rejected with a Status naming the field (never a
// crash, never an exception).
#include "protocol/control.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tests/protocol/sample_spec.h"

namespace nw {
namespace {

using json = nlohmann::json;

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "in: " << (haystack)

JobSpec Spec(int trial) {
  JobSpec s = testing_protocol::SampleSpec();
  s.trial = trial;
  s.max_new_tokens = 16;
  s.probe = false;
  return s;
}

zmq::multipart_t Frames(uint8_t cmd, const std::string& payload,
                        const std::string& version = std::string(kControlVersion)) {
  zmq::multipart_t m;
  m.addstr(version);
  m.addmem(&cmd, 1);
  m.addstr(payload);
  return m;
}
uint8_t Byte(ControlCommand c) { return static_cast<uint8_t>(c); }

ControlRequest RoundTrip(const ControlRequest& in) {
  auto frames = EncodeControlRequest(in);
  EXPECT_TRUE(frames.ok()) << frames.status().ToString();
  EXPECT_EQ(frames->size(), 3u);
  EXPECT_EQ((*frames)[0].to_string(), "NWC01");
  auto out = DecodeControlRequest(*frames);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return *out;
}

ControlReply RoundTrip(const ControlReply& in) {
  auto frames = EncodeControlReply(in);
  EXPECT_TRUE(frames.ok()) << frames.status().ToString();
  auto out = DecodeControlReply(*frames);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return *out;
}

std::string RejectedRequest(uint8_t cmd, const json& payload) {
  auto out = DecodeControlRequest(Frames(cmd, payload.dump()));
  EXPECT_FALSE(out.ok());
  if (out.ok()) return "";
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  return out.status().message();
}

SubmitRequest ValidSubmit() {
  SubmitRequest s;
  s.campaign = "sweep";
  s.source_path = "/home/me/sweep.yaml";
  s.source_text = "name: sweep\n";
  s.priority = 7;
  s.rerun = true;
  s.submission = "0123abcd";
  s.part = 1;
  s.parts = 3;
  s.total_jobs = 5;
  s.jobs = {Spec(0), Spec(1)};
  return s;
}

TEST(ControlTest, CommandNames) {
  EXPECT_EQ(ControlCommandName(0x41), "SUBMIT");
  EXPECT_EQ(ControlCommandName(0x52), "STATUS_REPLY");
  EXPECT_EQ(ControlCommandName(0x5f), "ERROR");
  EXPECT_EQ(ControlCommandName(0x2a), "UNKNOWN(0x2a)");
  EXPECT_EQ(CampaignOpName(CampaignOp::kResume), "resume");
}

TEST(ControlTest, RequestRoundTrips) {
  const SubmitRequest in = ValidSubmit();
  auto out = std::get<SubmitRequest>(RoundTrip(in));
  EXPECT_EQ(out.campaign, in.campaign);
  EXPECT_EQ(out.source_path, in.source_path);
  EXPECT_EQ(out.source_text, in.source_text);
  EXPECT_EQ(out.priority, 7);
  EXPECT_TRUE(out.rerun);
  EXPECT_EQ(out.submission, in.submission);
  EXPECT_EQ(out.part, 1);
  EXPECT_EQ(out.parts, 3);
  EXPECT_EQ(out.total_jobs, 5);
  ASSERT_EQ(out.jobs.size(), 2u);
  EXPECT_EQ(out.jobs[1].Key(), Spec(1).Key());

  EXPECT_EQ(std::get<StatusRequest>(RoundTrip(StatusRequest{""})).campaign, "");
  EXPECT_EQ(std::get<StatusRequest>(RoundTrip(StatusRequest{"x"})).campaign, "x");
  for (CampaignOp op : {CampaignOp::kCancel, CampaignOp::kPause, CampaignOp::kResume}) {
    auto c = std::get<CampaignOpRequest>(RoundTrip(CampaignOpRequest{op, "sweep"}));
    EXPECT_EQ(c.op, op);
    EXPECT_EQ(c.campaign, "sweep");
  }
}

TEST(ControlTest, ReplyRoundTrips) {
  auto sub = std::get<SubmitReply>(RoundTrip(SubmitReply{"sweep", 2, true, 9, 100, 40, 60}));
  EXPECT_EQ(sub.campaign, "sweep");
  EXPECT_EQ(sub.part, 2);
  EXPECT_TRUE(sub.complete);
  EXPECT_EQ(sub.campaign_id, 9);
  EXPECT_EQ(sub.jobs, 100);
  EXPECT_EQ(sub.already_done, 40);
  EXPECT_EQ(sub.queued, 60);

  StatusReply st;
  st.campaigns.push_back({"a", 1, -5, "paused", 10, 4, 1, 5, 0, 3, 2, 0, std::nullopt});
  st.workers.push_back(
      {"w-1", "box", "cpu", 2, 1, {"cpu", "cpu-paged"}, "", "", false, std::nullopt, 0});
  // A Slurm worker, draining: the optional fields.
  st.workers.push_back({"w-2", "n7", "cpu", 1, 1, {"cpu"}, "1234_3", "n7", true, std::nullopt, 0});
  auto st2 = std::get<StatusReply>(RoundTrip(st));
  ASSERT_EQ(st2.campaigns.size(), 1u);
  EXPECT_EQ(st2.campaigns[0].name, "a");
  EXPECT_EQ(st2.campaigns[0].priority, -5);
  EXPECT_EQ(st2.campaigns[0].state, "paused");
  EXPECT_EQ(st2.campaigns[0].done, 5);
  EXPECT_EQ(st2.campaigns[0].pass, 3);
  ASSERT_EQ(st2.workers.size(), 2u);
  EXPECT_EQ(st2.workers[0].busy, 1);
  EXPECT_EQ(st2.workers[0].backends, (std::vector<std::string>{"cpu", "cpu-paged"}));
  EXPECT_EQ(st2.workers[0].slurm_job, "");
  EXPECT_FALSE(st2.workers[0].draining);
  EXPECT_EQ(st2.workers[1].slurm_job, "1234_3");
  EXPECT_EQ(st2.workers[1].node, "n7");
  EXPECT_TRUE(st2.workers[1].draining);

  auto op = std::get<CampaignOpReply>(RoundTrip(CampaignOpReply{"a", "cancelled", 12}));
  EXPECT_EQ(op.state, "cancelled");
  EXPECT_EQ(op.queued_removed, 12);

  auto err = std::get<ErrorReply>(RoundTrip(ErrorReply{StatusCode::kNotFound, "no such"}));
  EXPECT_EQ(err.code, StatusCode::kNotFound);
  EXPECT_EQ(err.ToStatus().message(), "no such");
}

TEST(ControlTest, FramesVersionAndDirection) {
  auto two = Frames(Byte(ControlCommand::kStatus), "{\"campaign\":\"\"}");
  two.pop();
  EXPECT_HAS(DecodeControlRequest(two).status().message(), "expected 3 frames");
  EXPECT_HAS(
      DecodeControlRequest(Frames(Byte(ControlCommand::kStatus), "{}", "NWW01")).status().message(),
      "version frame 'NWW01' is not NWC01");
  EXPECT_HAS(DecodeControlRequest(Frames(0x07, "{}")).status().message(), "unknown command");
  // A reply is not a request, and a request is not a reply.
  EXPECT_HAS(DecodeControlRequest(Frames(Byte(ControlCommand::kError), "{}")).status().message(),
             "ERROR is not a request");
  EXPECT_HAS(DecodeControlReply(Frames(Byte(ControlCommand::kPause), "{}")).status().message(),
             "PAUSE is not a reply");
  EXPECT_HAS(
      DecodeControlRequest(Frames(Byte(ControlCommand::kStatus), "{nope")).status().message(),
      "STATUS: payload is not valid JSON");
  EXPECT_HAS(DecodeControlRequest(Frames(Byte(ControlCommand::kStatus), "[1]")).status().message(),
             "must be a JSON object");
  zmq::multipart_t big = Frames(Byte(ControlCommand::kStatus), std::string(5000, ' '));
  EXPECT_HAS(DecodeControlRequest(big, CodecLimits{4096}).status().message(), "over the");
  zmq::multipart_t wide = Frames(Byte(ControlCommand::kStatus), "{}");
  wide[1].rebuild("ab", 2);
  EXPECT_HAS(DecodeControlRequest(wide).status().message(), "command frame must be 1 byte");
}

TEST(ControlTest, MalformedSubmitNamesTheField) {
  const uint8_t sub = Byte(ControlCommand::kSubmit);
  auto valid = [] {
    auto f = EncodeControlRequest(ValidSubmit());
    return json::parse(std::string((*f)[2].to_string_view()));
  };
  auto with = [&](const std::string& key, const json& v) {
    json j = valid();
    j[key] = v;
    return j;
  };
  auto without = [&](const std::string& key) {
    json j = valid();
    j.erase(key);
    return j;
  };
  EXPECT_HAS(RejectedRequest(sub, without("campaign")), "SUBMIT.campaign: missing");
  EXPECT_HAS(RejectedRequest(sub, with("campaign", "")), "SUBMIT.campaign: length 0");
  EXPECT_HAS(RejectedRequest(sub, with("campaign", std::string(300, 'x'))), "length 300");
  EXPECT_HAS(RejectedRequest(sub, with("priority", 1001)), "SUBMIT.priority: 1001 outside");
  EXPECT_HAS(RejectedRequest(sub, with("priority", 1.5)), "SUBMIT.priority: must be an integer");
  EXPECT_HAS(RejectedRequest(sub, with("rerun", 1)), "SUBMIT.rerun: must be a boolean");
  EXPECT_HAS(RejectedRequest(sub, with("submission", "")), "SUBMIT.submission: length 0");
  EXPECT_HAS(RejectedRequest(sub, with("part", 3)), "SUBMIT.part: 3 outside [0, 2]");
  EXPECT_HAS(RejectedRequest(sub, with("parts", 0)), "SUBMIT.parts: 0 outside");
  EXPECT_HAS(RejectedRequest(sub, with("parts", kMaxSubmitParts + 1)), "SUBMIT.parts");
  EXPECT_HAS(RejectedRequest(sub, with("total_jobs", -1)), "SUBMIT.total_jobs: -1 outside");
  EXPECT_HAS(RejectedRequest(sub, with("jobs", "x")), "SUBMIT.jobs: must be an array");
  EXPECT_HAS(RejectedRequest(sub, with("jobs", json::array({1}))),
             "SUBMIT.jobs[0]: must be an object");
  json bad_job = Spec(0).ToJson();
  bad_job.erase("backend");
  EXPECT_HAS(RejectedRequest(sub, with("jobs", json::array({Spec(0).ToJson(), bad_job}))),
             "SUBMIT.jobs[1]");
  EXPECT_HAS(RejectedRequest(sub, with("source_text", std::string(kMaxSourceTextBytes + 1, 'y'))),
             "SUBMIT.source_text: length");
  json many = json::array();
  for (size_t i = 0; i <= kMaxJobsPerSubmitPart; ++i) many.push_back(json::object());
  EXPECT_HAS(RejectedRequest(sub, with("jobs", many)), "more than 4096");
  EXPECT_HAS(RejectedRequest(Byte(ControlCommand::kCancel), json::object()),
             "CANCEL.campaign: missing");
  EXPECT_HAS(RejectedRequest(Byte(ControlCommand::kStatus), json{{"campaign", 3}}),
             "STATUS.campaign: must be a string");
}

// A boundary search's settings on SUBMIT and its progress in STATUS_REPLY: optional (absent for
// a grid), round-tripped, and checked field by field.
TEST(ControlTest, SearchSettingsAndProgressRoundTripAndAreChecked) {
  SubmitRequest grid = ValidSubmit();
  EXPECT_FALSE(std::get<SubmitRequest>(RoundTrip(grid)).search.has_value());
  SubmitRequest in = ValidSubmit();
  in.search = SubmitSearch{6, 2, 0.9, 0.5, 40};
  auto out = std::get<SubmitRequest>(RoundTrip(in));
  ASSERT_TRUE(out.search.has_value());
  EXPECT_EQ(*out.search, *in.search);
  in.search->budget.reset();
  EXPECT_EQ(std::get<SubmitRequest>(RoundTrip(in)).search, in.search);

  const uint8_t sub = Byte(ControlCommand::kSubmit);
  auto with_search = [&](const std::string& key, const json& v) {
    SubmitRequest r = ValidSubmit();
    r.search = SubmitSearch{6, 2, 0.9, 0.5, 40};
    auto f = EncodeControlRequest(r);
    json j = json::parse(std::string((*f)[2].to_string_view()));
    if (v.is_null()) {
      j["search"].erase(key);
    } else {
      j["search"][key] = v;
    }
    return j;
  };
  EXPECT_HAS(RejectedRequest(sub, with_search("trials", 0)), "SUBMIT.search.trials: 0 outside");
  EXPECT_HAS(RejectedRequest(sub, with_search("first_trials", 7)),
             "SUBMIT.search.first_trials: 7 outside [1, 6]");
  EXPECT_HAS(RejectedRequest(sub, with_search("confidence", 1.0)),
             "SUBMIT.search.confidence: 1.000000 outside (0, 1)");
  EXPECT_HAS(RejectedRequest(sub, with_search("pass_rate", "high")),
             "SUBMIT.search.pass_rate: must be a number");
  EXPECT_HAS(RejectedRequest(sub, with_search("pass_rate", nullptr)),
             "SUBMIT.search.pass_rate: missing");
  EXPECT_HAS(RejectedRequest(sub, with_search("budget", 0)), "SUBMIT.search.budget: 0 outside");
  json not_object = with_search("budget", 1);
  not_object["search"] = 3;
  EXPECT_HAS(RejectedRequest(sub, not_object), "SUBMIT.search: must be an object");

  StatusReply st;
  st.campaigns.push_back({"grid", 1, 0, "active", 10, 4, 1, 5, 0, 3, 2, 0, std::nullopt});
  st.campaigns.push_back(
      {"s", 2, 0, "finished", 54, 0, 0, 54, 0, 30, 24, 0, SearchStatus{288, 54, 6, 6}});
  auto st2 = std::get<StatusReply>(RoundTrip(st));
  ASSERT_EQ(st2.campaigns.size(), 2u);
  EXPECT_FALSE(st2.campaigns[0].search.has_value());
  ASSERT_TRUE(st2.campaigns[1].search.has_value());
  EXPECT_EQ(st2.campaigns[1].search->grid_jobs, 288);
  EXPECT_EQ(st2.campaigns[1].search->asked_jobs, 54);
  EXPECT_EQ(st2.campaigns[1].search->lines, 6);
  EXPECT_EQ(st2.campaigns[1].search->lines_finished, 6);
  auto frames = EncodeControlReply(st);
  json j = json::parse(std::string((*frames)[2].to_string_view()));
  j["campaigns"][1]["search"].erase("lines");
  auto bad = DecodeControlReply(Frames(Byte(ControlCommand::kStatusReply), j.dump()));
  ASSERT_FALSE(bad.ok());
  EXPECT_HAS(bad.status().message(), "STATUS_REPLY.campaigns[1].search.lines: missing");
}

TEST(ControlTest, MalformedRepliesAreRejected) {
  auto reply = [](ControlCommand c, const json& p) {
    auto out = DecodeControlReply(Frames(Byte(c), p.dump()));
    EXPECT_FALSE(out.ok());
    return out.ok() ? std::string() : out.status().message();
  };
  EXPECT_HAS(reply(ControlCommand::kError, json{{"code", "ok"}, {"message", ""}}),
             "unknown status code 'ok'");
  EXPECT_HAS(reply(ControlCommand::kError, json{{"code", "bogus"}, {"message", ""}}),
             "unknown status code");
  EXPECT_HAS(
      reply(ControlCommand::kStatusReply,
            json{{"campaigns", json::array({json{{"name", "a"}}})}, {"workers", json::array()}}),
      "STATUS_REPLY.campaigns[0].id: missing");
  EXPECT_HAS(reply(ControlCommand::kSubmitted, json{{"campaign", "a"}}), "SUBMITTED.part: missing");
}

TEST(ControlTest, OversizePayloadIsRefusedByTheEncoder) {
  SubmitRequest s = ValidSubmit();
  s.source_text = std::string(2000, 'x');
  auto f = EncodeControlRequest(s, CodecLimits{1024});
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kResourceExhausted);
}

TEST(ControlTest, ReadyOptionalCapabilitiesAreChecked) {
  auto ready = [](const json& caps) {
    json p = {{"worker_id", "w"},
              {"host", "h"},
              {"slots", 2},
              {"capabilities", caps},
              {"held", json::array()}};
    zmq::multipart_t m;
    m.addstr("");
    m.addstr(std::string(kProtocolVersion));
    const uint8_t b = static_cast<uint8_t>(Command::kReady);
    m.addmem(&b, 1);
    m.addstr(p.dump());
    return Decode(m);
  };
  EXPECT_TRUE(ready({{"backends", {"cpu"}}, {"prefetch", 2}, {"models", {"d1"}}}).ok());
  EXPECT_HAS(ready({{"backends", {"cpu"}}, {"prefetch", -1}}).status().message(),
             "READY.capabilities.prefetch: -1 outside");
  EXPECT_HAS(ready({{"backends", {"cpu"}}, {"prefetch", true}}).status().message(),
             "must be an integer");
  EXPECT_HAS(ready({{"backends", {"cpu"}}, {"models", "d1"}}).status().message(),
             "READY.capabilities.models: must be an array");
  EXPECT_HAS(ready({{"backends", {"cpu"}}, {"engine_versions", {""}}}).status().message(),
             "READY.capabilities.engine_versions[0]");
}

TEST(ControlTest, RandomBytesNeverThrow) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 3000; ++i) {
    zmq::multipart_t m;
    const int frames = static_cast<int>(rng() % 5);
    for (int f = 0; f < frames; ++f) {
      std::string s(rng() % 40, '\0');
      for (auto& c : s) c = static_cast<char>(rng());
      if (f == 0 && rng() % 2) s = "NWC01";
      if (f == 1 && rng() % 2) s = std::string(1, static_cast<char>(0x41 + rng() % 5));
      if (f == 2 && rng() % 2) s = "{\"campaign\":\"x\",\"jobs\":[{}]}";
      m.addstr(s);
    }
    EXPECT_NO_THROW({
      (void)DecodeControlRequest(m);
      (void)DecodeControlReply(m);
    });
  }
}

}  // namespace
}  // namespace nw
