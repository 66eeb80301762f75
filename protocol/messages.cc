#include "protocol/messages.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "protocol/json_reader.h"

namespace nw {
namespace {

using json = nlohmann::json;
using protocol_internal::Reader;

constexpr int kMaxAttempt = 1'000'000;

std::string FrameText(const zmq::message_t& m) { return std::string(m.to_string_view()); }

Status CheckAttemptRef(const json& j, const std::string& where, AttemptRef* out) {
  if (!j.is_object()) return Status::InvalidArgument(where + ": must be an object");
  Reader r(j, where);
  NW_RETURN_IF_ERROR(r.String("job_key", &out->job_key, 1, kMaxIdBytes));
  NW_RETURN_IF_ERROR(r.Integer("attempt", &out->attempt, 1, kMaxAttempt));
  return Status::Ok();
}

Result<Message> DecodeReady(const json& p) {
  const std::string w = "READY";
  Reader r(p, w);
  ReadyMsg m;
  NW_RETURN_IF_ERROR(r.String("worker_id", &m.worker_id, 1, kMaxIdBytes));
  NW_RETURN_IF_ERROR(r.String("host", &m.host, 0, kMaxIdBytes));
  NW_RETURN_IF_ERROR(r.Integer("slots", &m.slots, 1, kMaxSlots));
  const json* caps = nullptr;
  NW_RETURN_IF_ERROR(r.Object("capabilities", &caps));
  Reader cr(*caps, w + ".capabilities");
  const json* backends = nullptr;
  NW_RETURN_IF_ERROR(cr.Array("backends", &backends, 64));
  for (size_t i = 0; i < backends->size(); ++i) {
    const json& b = (*backends)[i];
    if (!b.is_string() || b.get_ref<const std::string&>().empty()) {
      return Status::InvalidArgument(w + ".capabilities.backends[" + std::to_string(i) +
                                     "]: must be a non-empty string");
    }
  }
  // Optional keys the scheduler matches on are checked when present (docs/protocol.md).
  if (caps->contains("prefetch")) {
    int prefetch = 0;
    NW_RETURN_IF_ERROR(cr.Integer("prefetch", &prefetch, 0, int64_t{kMaxSlots} * 3));
  }
  for (const char* key : {"models", "engine_versions"}) {
    if (!caps->contains(key)) continue;
    const json* list = nullptr;
    NW_RETURN_IF_ERROR(cr.Array(key, &list, kMaxCapabilityList));
    for (size_t i = 0; i < list->size(); ++i) {
      const json& v = (*list)[i];
      if (!v.is_string() || v.get_ref<const std::string&>().empty() ||
          v.get_ref<const std::string&>().size() > kMaxIdBytes) {
        return Status::InvalidArgument(w + ".capabilities." + key + "[" + std::to_string(i) +
                                       "]: must be a string of 1.." + std::to_string(kMaxIdBytes) +
                                       " bytes");
      }
    }
  }
  // Stored with the worker's record and shown in status: bounded as a whole.
  const size_t caps_bytes = caps->dump(-1, ' ', false, json::error_handler_t::replace).size();
  if (caps_bytes > kMaxCapabilityBytes) {
    return Status::InvalidArgument(w + ".capabilities: " + std::to_string(caps_bytes) +
                                   " bytes, over the " + std::to_string(kMaxCapabilityBytes) +
                                   "-byte limit");
  }
  m.capabilities = *caps;
  const json* held = nullptr;
  NW_RETURN_IF_ERROR(r.Array("held", &held, static_cast<size_t>(kMaxSlots) * 4));
  for (size_t i = 0; i < held->size(); ++i) {
    AttemptRef a;
    NW_RETURN_IF_ERROR(CheckAttemptRef((*held)[i], w + ".held[" + std::to_string(i) + "]", &a));
    m.held.push_back(std::move(a));
  }
  return Message(std::move(m));
}

Result<Message> DecodeJob(const json& p) {
  Reader r(p, "JOB");
  JobMsg m;
  NW_RETURN_IF_ERROR(r.String("job_key", &m.job_key, 1, kMaxIdBytes));
  NW_RETURN_IF_ERROR(r.Integer("attempt", &m.attempt, 1, kMaxAttempt));
  NW_RETURN_IF_ERROR(r.Integer("lease_ms", &m.lease_ms, 1, std::numeric_limits<int64_t>::max()));
  NW_RETURN_IF_ERROR(r.Integer("lease_expires_wall_ms", &m.lease_expires_wall_ms, 0,
                               std::numeric_limits<int64_t>::max()));
  const json* spec = nullptr;
  NW_RETURN_IF_ERROR(r.Object("spec", &spec));
  auto s = JobSpec::FromJson(*spec);
  if (!s.ok()) return s.status().WithContext("JOB.spec");
  m.spec = std::move(s).value();
  return Message(std::move(m));
}

Result<Message> DecodeResult(const json& p) {
  Reader r(p, "RESULT");
  const json* res = nullptr;
  NW_RETURN_IF_ERROR(r.Object("result", &res));
  // The fields that fencing needs are checked here with their full path; the rest by FromJson.
  AttemptRef ref;
  NW_RETURN_IF_ERROR(CheckAttemptRef(*res, "RESULT.result", &ref));
  auto jr = JobResult::FromJson(*res);
  if (!jr.ok()) return jr.status().WithContext("RESULT.result");
  return Message(ResultMsg{std::move(jr).value()});
}

Result<Message> DecodeAck(const json& p) {
  Reader r(p, "ACK");
  AckMsg m;
  NW_RETURN_IF_ERROR(r.String("job_key", &m.job_key, 1, kMaxIdBytes));
  NW_RETURN_IF_ERROR(r.Integer("attempt", &m.attempt, 1, kMaxAttempt));
  std::string status;
  NW_RETURN_IF_ERROR(r.String("status", &status, 1, 64));
  auto s = ParseAckStatus(status);
  if (!s.ok()) return s.status().WithContext("ACK.status");
  m.status = *s;
  NW_RETURN_IF_ERROR(r.String("reason", &m.reason, 0, std::numeric_limits<size_t>::max()));
  return Message(std::move(m));
}

// Optional gpu_busy (a number in [0, 1]) with gpu_busy_ms (an integer >= 0); `{}` is a plain
// heartbeat.
Result<Message> DecodeHeartbeat(const json& p) {
  HeartbeatMsg m;
  auto g = p.find("gpu_busy");
  if (g == p.end()) return Message(m);
  if (!g->is_number() || !std::isfinite(g->get<double>()) || g->get<double>() < 0 ||
      g->get<double>() > 1) {
    return Status::InvalidArgument("HEARTBEAT.gpu_busy: must be a number in [0, 1]");
  }
  m.gpu_busy = g->get<double>();
  Reader r(p, "HEARTBEAT");
  NW_RETURN_IF_ERROR(
      r.Integer("gpu_busy_ms", &m.gpu_busy_ms, 0, std::numeric_limits<int64_t>::max()));
  return Message(m);
}

Result<Message> DecodeDisconnect(const json& p) {
  Reader r(p, "DISCONNECT");
  DisconnectMsg m;
  NW_RETURN_IF_ERROR(r.String("reason", &m.reason, 0, std::numeric_limits<size_t>::max()));
  NW_RETURN_IF_ERROR(r.Bool("reconnect", &m.reconnect));
  return Message(std::move(m));
}

json AttemptRefJson(const AttemptRef& a) {
  return json{{"job_key", a.job_key}, {"attempt", a.attempt}};
}

}  // namespace

json PayloadOf(const Message& m) {
  struct Visitor {
    json operator()(const ReadyMsg& r) const {
      json held = json::array();
      for (const auto& a : r.held) held.push_back(AttemptRefJson(a));
      return json{{"worker_id", r.worker_id},
                  {"host", r.host},
                  {"slots", r.slots},
                  {"capabilities", r.capabilities},
                  {"held", held}};
    }
    json operator()(const JobMsg& j) const {
      return json{{"job_key", j.job_key},
                  {"attempt", j.attempt},
                  {"lease_ms", j.lease_ms},
                  {"lease_expires_wall_ms", j.lease_expires_wall_ms},
                  {"spec", j.spec.ToJson()}};
    }
    json operator()(const ResultMsg& r) const { return json{{"result", r.result.ToJson()}}; }
    json operator()(const AckMsg& a) const {
      return json{{"job_key", a.job_key},
                  {"attempt", a.attempt},
                  {"status", AckStatusName(a.status)},
                  {"reason", a.reason}};
    }
    json operator()(const HeartbeatMsg& h) const {
      if (!h.gpu_busy) return json::object();
      return json{{"gpu_busy", *h.gpu_busy}, {"gpu_busy_ms", h.gpu_busy_ms}};
    }
    json operator()(const DisconnectMsg& d) const {
      return json{{"reason", d.reason}, {"reconnect", d.reconnect}};
    }
  };
  return std::visit(Visitor{}, m);
}

Result<zmq::multipart_t> Encode(const Message& m, const CodecLimits& limits) {
  const Command cmd = CommandOf(m);
  std::string payload;
  try {
    // Replace invalid UTF-8 (e.g. a model's partial multi-byte token) instead of throwing.
    payload = PayloadOf(m).dump(-1, ' ', false, json::error_handler_t::replace);
  } catch (const json::exception& e) {
    return Status::Internal(CommandName(cmd) + ": cannot serialize payload: " + e.what());
  }
  if (payload.size() > limits.max_frame_bytes) {
    return Status::ResourceExhausted(CommandName(cmd) + ": payload is " +
                                     std::to_string(payload.size()) + " bytes, over the " +
                                     std::to_string(limits.max_frame_bytes) + "-byte frame limit");
  }
  zmq::multipart_t out;
  out.addstr("");
  out.addstr(std::string(kProtocolVersion));
  const uint8_t byte = static_cast<uint8_t>(cmd);
  out.addmem(&byte, 1);
  out.addstr(payload);
  return out;
}

Result<Message> Decode(const zmq::multipart_t& frames, const CodecLimits& limits) {
  if (frames.size() != 4) {
    return Status::InvalidArgument("message: expected 4 frames ([\"\"][" +
                                   std::string(kProtocolVersion) + "][command][payload]), got " +
                                   std::to_string(frames.size()));
  }
  for (size_t i = 0; i < frames.size(); ++i) {
    if (frames[i].size() > limits.max_frame_bytes) {
      return Status::InvalidArgument("message: frame " + std::to_string(i) + " is " +
                                     std::to_string(frames[i].size()) + " bytes, over the " +
                                     std::to_string(limits.max_frame_bytes) + "-byte limit");
    }
  }
  if (frames[0].size() != 0) {
    return Status::InvalidArgument("message: frame 0 must be the empty delimiter, got " +
                                   std::to_string(frames[0].size()) + " bytes");
  }
  if (frames[1].to_string_view() != kProtocolVersion) {
    const std::string v = FrameText(frames[1]).substr(0, 32);
    return Status::InvalidArgument("message: version frame '" + v + "' is not " +
                                   std::string(kProtocolVersion));
  }
  if (frames[2].size() != 1) {
    return Status::InvalidArgument("message: command frame must be 1 byte, got " +
                                   std::to_string(frames[2].size()));
  }
  const uint8_t byte = *static_cast<const uint8_t*>(frames[2].data());
  const std::string name = CommandName(byte);
  if (byte < static_cast<uint8_t>(Command::kReady) ||
      byte > static_cast<uint8_t>(Command::kDisconnect)) {
    return Status::InvalidArgument("message: unknown command " + name);
  }
  const Command cmd = static_cast<Command>(byte);
  json payload;
  try {
    const auto text = frames[3].to_string_view();
    payload = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return Status::InvalidArgument(name + ": payload is not valid JSON (" + e.what() + ")");
  }
  if (!payload.is_object()) {
    return Status::InvalidArgument(name + ": payload must be a JSON object");
  }
  try {
    switch (cmd) {
      case Command::kReady:
        return DecodeReady(payload);
      case Command::kJob:
        return DecodeJob(payload);
      case Command::kResult:
        return DecodeResult(payload);
      case Command::kAck:
        return DecodeAck(payload);
      case Command::kHeartbeat:
        return DecodeHeartbeat(payload);
      case Command::kDisconnect:
        return DecodeDisconnect(payload);
    }
  } catch (const json::exception& e) {
    // The readers check types first; this is a last line of defence, never a crash.
    return Status::InvalidArgument(name + ": " + e.what());
  }
  return Status::InvalidArgument("message: unknown command " + name);
}

std::string HexId(const zmq::message_t& id) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  const auto* p = static_cast<const uint8_t*>(id.data());
  for (size_t i = 0; i < id.size() && i < 64; ++i) {
    out.push_back(kHex[p[i] >> 4]);
    out.push_back(kHex[p[i] & 15]);
  }
  if (id.size() > 64) out += "...";
  return out;
}

}  // namespace nw
