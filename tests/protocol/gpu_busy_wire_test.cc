// GPU busy on the wire (docs/protocol.md, "GPU busy"): HEARTBEAT's optional gpu_busy and
// gpu_busy_ms, RESULT's optional result.gpu_busy and STATUS_REPLY's optional workers[].gpu_busy
// round-trip, are left out when unknown (an old peer sees exactly what it saw before), and are
// refused, naming the field, when they are not a fraction.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "protocol/control.h"
#include "protocol/messages.h"

namespace nw {
namespace {

using json = nlohmann::json;

zmq::multipart_t HeartbeatFrames(const std::string& payload) {
  zmq::multipart_t f;
  f.addstr("");
  f.addstr(std::string(kProtocolVersion));
  f.addstr(std::string(1, static_cast<char>(Command::kHeartbeat)));
  f.addstr(payload);
  return f;
}

TEST(GpuBusyWire, HeartbeatCarriesItOnlyWhenKnown) {
  auto plain = Encode(HeartbeatMsg{});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)[3].to_string(), "{}");
  HeartbeatMsg hb;
  hb.gpu_busy = 0.875;
  hb.gpu_busy_ms = 10'000;
  auto f = Encode(hb);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(json::parse((*f)[3].to_string()), (json{{"gpu_busy", 0.875}, {"gpu_busy_ms", 10000}}));
  auto back = Decode(*f);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto& got = std::get<HeartbeatMsg>(*back);
  ASSERT_TRUE(got.gpu_busy.has_value());
  EXPECT_DOUBLE_EQ(*got.gpu_busy, 0.875);
  EXPECT_EQ(got.gpu_busy_ms, 10'000);
  auto empty = Decode(HeartbeatFrames("{}"));
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(std::get<HeartbeatMsg>(*empty).gpu_busy.has_value());
}

TEST(GpuBusyWire, HeartbeatRefusesWhatIsNotAFraction) {
  for (const std::string bad :
       {R"({"gpu_busy": 1.5, "gpu_busy_ms": 1})", R"({"gpu_busy": -0.1, "gpu_busy_ms": 1})",
        R"({"gpu_busy": "0.5", "gpu_busy_ms": 1})", R"({"gpu_busy": true, "gpu_busy_ms": 1})"}) {
    auto m = Decode(HeartbeatFrames(bad));
    ASSERT_FALSE(m.ok()) << bad;
    EXPECT_NE(m.status().message().find("HEARTBEAT.gpu_busy: must be a number in [0, 1]"),
              std::string::npos)
        << m.status().ToString();
  }
  auto no_ms = Decode(HeartbeatFrames(R"({"gpu_busy": 0.5})"));
  ASSERT_FALSE(no_ms.ok());
  EXPECT_NE(no_ms.status().message().find("HEARTBEAT.gpu_busy_ms: missing"), std::string::npos)
      << no_ms.status().ToString();
  auto bad_ms = Decode(HeartbeatFrames(R"({"gpu_busy": 0.5, "gpu_busy_ms": 2.5})"));
  ASSERT_FALSE(bad_ms.ok());
  EXPECT_NE(bad_ms.status().message().find("HEARTBEAT.gpu_busy_ms: must be an integer"),
            std::string::npos);
}

TEST(GpuBusyWire, ResultCarriesItOnlyWhenKnownAndBoundsCheckIt) {
  JobResult r;
  r.job_key = "k";
  r.attempt = 1;
  r.outcome = Outcome::kPass;
  EXPECT_FALSE(r.ToJson().contains("gpu_busy"));
  auto plain = JobResult::FromJson(r.ToJson());
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->gpu_busy.has_value());
  r.gpu_busy = 0.25;
  auto back = JobResult::FromJson(r.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_TRUE(back->gpu_busy.has_value());
  EXPECT_DOUBLE_EQ(*back->gpu_busy, 0.25);
  EXPECT_TRUE(CheckResultBounds(r).ok());
  json j = r.ToJson();
  j["gpu_busy"] = "busy";
  EXPECT_NE(JobResult::FromJson(j).status().message().find("result.gpu_busy: must be a number"),
            std::string::npos);
  r.gpu_busy = 1.01;
  const Status st = CheckResultBounds(r);
  EXPECT_NE(st.message().find("result.gpu_busy: must be a fraction in [0, 1]"), std::string::npos)
      << st.ToString();
}

TEST(GpuBusyWire, StatusReplyCarriesEachWorkersLastInterval) {
  StatusReply s;
  WorkerStatus gpu;
  gpu.id = "gpu-0";
  gpu.slots = 1;
  gpu.backends = {"cuda"};
  gpu.gpu_busy = 0.9;
  gpu.gpu_busy_ms = 10'000;
  WorkerStatus cpu = gpu;
  cpu.id = "cpu-0";
  cpu.gpu_busy.reset();
  s.workers = {gpu, cpu};
  auto f = EncodeControlReply(ControlReply(s));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const json payload = json::parse((*f)[f->size() - 1].to_string());
  EXPECT_FALSE(payload["workers"][1].contains("gpu_busy"));  // unknown: left out
  auto back = DecodeControlReply(*f);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto& got = std::get<StatusReply>(*back);
  ASSERT_EQ(got.workers.size(), 2u);
  ASSERT_TRUE(got.workers[0].gpu_busy.has_value());
  EXPECT_DOUBLE_EQ(*got.workers[0].gpu_busy, 0.9);
  EXPECT_EQ(got.workers[0].gpu_busy_ms, 10'000);
  EXPECT_FALSE(got.workers[1].gpu_busy.has_value());
}

}  // namespace
}  // namespace nw
