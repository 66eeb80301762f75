#include "protocol/control.h"

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

constexpr int64_t kMaxCount = std::numeric_limits<int64_t>::max();
constexpr size_t kMaxStateBytes = 32;
constexpr size_t kMaxMessageBytes = 64 * 1024;

bool IsRequest(uint8_t b) {
  return b >= static_cast<uint8_t>(ControlCommand::kSubmit) &&
         b <= static_cast<uint8_t>(ControlCommand::kResume);
}
bool IsReply(uint8_t b) {
  return (b >= static_cast<uint8_t>(ControlCommand::kSubmitted) &&
          b <= static_cast<uint8_t>(ControlCommand::kCampaignReply)) ||
         b == static_cast<uint8_t>(ControlCommand::kError);
}

json RequestPayload(const ControlRequest& r) {
  struct Visitor {
    json operator()(const SubmitRequest& s) const {
      json jobs = json::array();
      for (const auto& j : s.jobs) jobs.push_back(j.ToJson());
      json out{{"campaign", s.campaign},
               {"source_path", s.source_path},
               {"source_text", s.source_text},
               {"priority", s.priority},
               {"rerun", s.rerun},
               {"submission", s.submission},
               {"part", s.part},
               {"parts", s.parts},
               {"total_jobs", s.total_jobs},
               {"jobs", std::move(jobs)}};
      if (s.search) {
        json search{{"trials", s.search->trials},
                    {"first_trials", s.search->first_trials},
                    {"confidence", s.search->confidence},
                    {"pass_rate", s.search->pass_rate}};
        if (s.search->budget) search["budget"] = *s.search->budget;
        out["search"] = std::move(search);
      }
      return out;
    }
    json operator()(const StatusRequest& s) const { return json{{"campaign", s.campaign}}; }
    json operator()(const CampaignOpRequest& c) const { return json{{"campaign", c.campaign}}; }
  };
  return std::visit(Visitor{}, r);
}

ControlCommand RequestCommand(const ControlRequest& r) {
  if (std::holds_alternative<SubmitRequest>(r)) return ControlCommand::kSubmit;
  if (std::holds_alternative<StatusRequest>(r)) return ControlCommand::kStatus;
  switch (std::get<CampaignOpRequest>(r).op) {
    case CampaignOp::kCancel:
      return ControlCommand::kCancel;
    case CampaignOp::kPause:
      return ControlCommand::kPause;
    case CampaignOp::kResume:
      return ControlCommand::kResume;
  }
  return ControlCommand::kPause;
}

json ReplyPayload(const ControlReply& r) {
  struct Visitor {
    json operator()(const SubmitReply& s) const {
      return json{{"campaign", s.campaign}, {"part", s.part},
                  {"complete", s.complete}, {"campaign_id", s.campaign_id},
                  {"jobs", s.jobs},         {"already_done", s.already_done},
                  {"queued", s.queued}};
    }
    json operator()(const StatusReply& s) const {
      json campaigns = json::array();
      for (const auto& c : s.campaigns) {
        campaigns.push_back(json{{"name", c.name},
                                 {"id", c.id},
                                 {"priority", c.priority},
                                 {"state", c.state},
                                 {"total", c.total},
                                 {"queued", c.queued},
                                 {"leased", c.leased},
                                 {"done", c.done},
                                 {"failed", c.failed},
                                 {"pass", c.pass},
                                 {"miss", c.miss},
                                 {"other", c.other}});
        if (c.search) {
          campaigns.back()["search"] = json{{"grid_jobs", c.search->grid_jobs},
                                            {"asked_jobs", c.search->asked_jobs},
                                            {"lines", c.search->lines},
                                            {"lines_finished", c.search->lines_finished}};
        }
      }
      json workers = json::array();
      for (const auto& w : s.workers) {
        json wj{{"id", w.id},       {"host", w.host}, {"device", w.device},
                {"slots", w.slots}, {"busy", w.busy}, {"backends", w.backends}};
        if (!w.slurm_job.empty()) wj["slurm_job"] = w.slurm_job;
        if (!w.node.empty()) wj["node"] = w.node;
        if (w.draining) wj["draining"] = true;
        if (w.gpu_busy) {
          wj["gpu_busy"] = *w.gpu_busy;
          wj["gpu_busy_ms"] = w.gpu_busy_ms;
        }
        workers.push_back(std::move(wj));
      }
      return json{{"campaigns", std::move(campaigns)}, {"workers", std::move(workers)}};
    }
    json operator()(const CampaignOpReply& c) const {
      return json{
          {"campaign", c.campaign}, {"state", c.state}, {"queued_removed", c.queued_removed}};
    }
    json operator()(const ErrorReply& e) const {
      return json{{"code", StatusCodeName(e.code)}, {"message", e.message}};
    }
  };
  return std::visit(Visitor{}, r);
}

ControlCommand ReplyCommand(const ControlReply& r) {
  if (std::holds_alternative<SubmitReply>(r)) return ControlCommand::kSubmitted;
  if (std::holds_alternative<StatusReply>(r)) return ControlCommand::kStatusReply;
  if (std::holds_alternative<CampaignOpReply>(r)) return ControlCommand::kCampaignReply;
  return ControlCommand::kError;
}

Result<zmq::multipart_t> EncodeFrames(ControlCommand cmd, const json& payload_json,
                                      const CodecLimits& limits) {
  const uint8_t byte = static_cast<uint8_t>(cmd);
  std::string payload;
  try {
    payload = payload_json.dump(-1, ' ', false, json::error_handler_t::replace);
  } catch (const json::exception& e) {
    return Status::Internal(ControlCommandName(byte) + ": cannot serialize payload: " + e.what());
  }
  if (payload.size() > limits.max_frame_bytes) {
    return Status::ResourceExhausted(ControlCommandName(byte) + ": payload is " +
                                     std::to_string(payload.size()) + " bytes, over the " +
                                     std::to_string(limits.max_frame_bytes) + "-byte frame limit");
  }
  zmq::multipart_t out;
  out.addstr(std::string(kControlVersion));
  out.addmem(&byte, 1);
  out.addstr(payload);
  return out;
}

// Checks the frames and parses the payload; returns the command byte.
Result<uint8_t> Frames(const zmq::multipart_t& frames, const CodecLimits& limits, json* payload) {
  if (frames.size() != 3) {
    return Status::InvalidArgument("control: expected 3 frames ([" + std::string(kControlVersion) +
                                   "][command][payload]), got " + std::to_string(frames.size()));
  }
  for (size_t i = 0; i < frames.size(); ++i) {
    if (frames[i].size() > limits.max_frame_bytes) {
      return Status::InvalidArgument("control: frame " + std::to_string(i) + " is " +
                                     std::to_string(frames[i].size()) + " bytes, over the " +
                                     std::to_string(limits.max_frame_bytes) + "-byte limit");
    }
  }
  if (frames[0].to_string_view() != kControlVersion) {
    const std::string v(frames[0].to_string_view().substr(0, 32));
    return Status::InvalidArgument("control: version frame '" + v + "' is not " +
                                   std::string(kControlVersion));
  }
  if (frames[1].size() != 1) {
    return Status::InvalidArgument("control: command frame must be 1 byte, got " +
                                   std::to_string(frames[1].size()));
  }
  const uint8_t byte = *static_cast<const uint8_t*>(frames[1].data());
  const std::string name = ControlCommandName(byte);
  if (!IsRequest(byte) && !IsReply(byte)) {
    return Status::InvalidArgument("control: unknown command " + name);
  }
  try {
    const auto text = frames[2].to_string_view();
    *payload = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return Status::InvalidArgument(name + ": payload is not valid JSON (" + e.what() + ")");
  }
  if (!payload->is_object()) {
    return Status::InvalidArgument(name + ": payload must be a JSON object");
  }
  return byte;
}

Status CheckName(const Reader& r, std::string* out, bool allow_empty) {
  return r.String("campaign", out, allow_empty ? 0 : 1, kMaxIdBytes);
}

// A number strictly between 0 and 1.
Status Fraction(const Reader& r, const json& obj, const char* key, double* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return Status::InvalidArgument(r.Path(key) + ": missing");
  if (!it->is_number()) return Status::InvalidArgument(r.Path(key) + ": must be a number");
  const double v = it->get<double>();
  if (!(v > 0 && v < 1)) {
    return Status::InvalidArgument(r.Path(key) + ": " + std::to_string(v) + " outside (0, 1)");
  }
  *out = v;
  return Status::Ok();
}

Result<ControlRequest> DecodeSubmit(const json& p) {
  Reader r(p, "SUBMIT");
  SubmitRequest s;
  NW_RETURN_IF_ERROR(CheckName(r, &s.campaign, false));
  NW_RETURN_IF_ERROR(r.String("source_path", &s.source_path, 0, kMaxSourcePathBytes));
  NW_RETURN_IF_ERROR(r.String("source_text", &s.source_text, 0, kMaxSourceTextBytes));
  NW_RETURN_IF_ERROR(
      r.Integer("priority", &s.priority, kMinCampaignPriority, kMaxCampaignPriority));
  NW_RETURN_IF_ERROR(r.Bool("rerun", &s.rerun));
  NW_RETURN_IF_ERROR(r.String("submission", &s.submission, 1, kMaxSubmissionIdBytes));
  NW_RETURN_IF_ERROR(r.Integer("parts", &s.parts, 1, kMaxSubmitParts));
  NW_RETURN_IF_ERROR(r.Integer("part", &s.part, 0, s.parts - 1));
  NW_RETURN_IF_ERROR(r.Integer("total_jobs", &s.total_jobs, 0,
                               static_cast<int64_t>(kMaxJobsPerSubmitPart) * s.parts));
  const json* jobs = nullptr;
  NW_RETURN_IF_ERROR(r.Array("jobs", &jobs, kMaxJobsPerSubmitPart));
  s.jobs.reserve(jobs->size());
  for (size_t i = 0; i < jobs->size(); ++i) {
    const std::string where = "SUBMIT.jobs[" + std::to_string(i) + "]";
    if (!(*jobs)[i].is_object()) return Status::InvalidArgument(where + ": must be an object");
    auto spec = JobSpec::FromJson((*jobs)[i]);
    if (!spec.ok()) return spec.status().WithContext(where);
    s.jobs.push_back(std::move(spec).value());
  }
  if (p.contains("search")) {
    const json* search = nullptr;
    NW_RETURN_IF_ERROR(r.Object("search", &search));
    Reader sr(*search, "SUBMIT.search");
    SubmitSearch ss;
    NW_RETURN_IF_ERROR(sr.Integer("trials", &ss.trials, 1, 1 << 20));
    NW_RETURN_IF_ERROR(sr.Integer("first_trials", &ss.first_trials, 1, ss.trials));
    NW_RETURN_IF_ERROR(Fraction(sr, *search, "confidence", &ss.confidence));
    NW_RETURN_IF_ERROR(Fraction(sr, *search, "pass_rate", &ss.pass_rate));
    if (search->contains("budget")) {
      int64_t budget = 0;
      NW_RETURN_IF_ERROR(sr.Integer("budget", &budget, 1, kMaxCount));
      ss.budget = budget;
    }
    s.search = ss;
  }
  return ControlRequest(std::move(s));
}

Result<ControlReply> DecodeSubmitted(const json& p) {
  Reader r(p, "SUBMITTED");
  SubmitReply s;
  NW_RETURN_IF_ERROR(CheckName(r, &s.campaign, false));
  NW_RETURN_IF_ERROR(r.Integer("part", &s.part, 0, kMaxSubmitParts - 1));
  NW_RETURN_IF_ERROR(r.Bool("complete", &s.complete));
  NW_RETURN_IF_ERROR(r.Integer("campaign_id", &s.campaign_id, 0, kMaxCount));
  NW_RETURN_IF_ERROR(r.Integer("jobs", &s.jobs, 0, kMaxCount));
  NW_RETURN_IF_ERROR(r.Integer("already_done", &s.already_done, 0, kMaxCount));
  NW_RETURN_IF_ERROR(r.Integer("queued", &s.queued, 0, kMaxCount));
  return ControlReply(std::move(s));
}

Result<ControlReply> DecodeStatusReply(const json& p) {
  Reader r(p, "STATUS_REPLY");
  StatusReply s;
  const json* campaigns = nullptr;
  NW_RETURN_IF_ERROR(r.Array("campaigns", &campaigns, kMaxStatusEntries));
  for (size_t i = 0; i < campaigns->size(); ++i) {
    const std::string where = "STATUS_REPLY.campaigns[" + std::to_string(i) + "]";
    const json& cj = (*campaigns)[i];
    if (!cj.is_object()) return Status::InvalidArgument(where + ": must be an object");
    Reader cr(cj, where);
    CampaignStatus c;
    NW_RETURN_IF_ERROR(cr.String("name", &c.name, 1, kMaxIdBytes));
    NW_RETURN_IF_ERROR(cr.Integer("id", &c.id, 0, kMaxCount));
    NW_RETURN_IF_ERROR(
        cr.Integer("priority", &c.priority, kMinCampaignPriority, kMaxCampaignPriority));
    NW_RETURN_IF_ERROR(cr.String("state", &c.state, 1, kMaxStateBytes));
    NW_RETURN_IF_ERROR(cr.Integer("total", &c.total, 0, kMaxCount));
    NW_RETURN_IF_ERROR(cr.Integer("queued", &c.queued, 0, kMaxCount));
    NW_RETURN_IF_ERROR(cr.Integer("leased", &c.leased, 0, kMaxCount));
    NW_RETURN_IF_ERROR(cr.Integer("done", &c.done, 0, kMaxCount));
    NW_RETURN_IF_ERROR(cr.Integer("failed", &c.failed, 0, kMaxCount));
    NW_RETURN_IF_ERROR(cr.Integer("pass", &c.pass, 0, kMaxCount));
    NW_RETURN_IF_ERROR(cr.Integer("miss", &c.miss, 0, kMaxCount));
    NW_RETURN_IF_ERROR(cr.Integer("other", &c.other, 0, kMaxCount));
    if (cj.contains("search")) {
      const json* search = nullptr;
      NW_RETURN_IF_ERROR(cr.Object("search", &search));
      Reader sr(*search, where + ".search");
      SearchStatus ss;
      NW_RETURN_IF_ERROR(sr.Integer("grid_jobs", &ss.grid_jobs, 0, kMaxCount));
      NW_RETURN_IF_ERROR(sr.Integer("asked_jobs", &ss.asked_jobs, 0, kMaxCount));
      NW_RETURN_IF_ERROR(sr.Integer("lines", &ss.lines, 0, kMaxCount));
      NW_RETURN_IF_ERROR(sr.Integer("lines_finished", &ss.lines_finished, 0, kMaxCount));
      c.search = ss;
    }
    s.campaigns.push_back(std::move(c));
  }
  const json* workers = nullptr;
  NW_RETURN_IF_ERROR(r.Array("workers", &workers, kMaxStatusEntries));
  for (size_t i = 0; i < workers->size(); ++i) {
    const std::string where = "STATUS_REPLY.workers[" + std::to_string(i) + "]";
    const json& wj = (*workers)[i];
    if (!wj.is_object()) return Status::InvalidArgument(where + ": must be an object");
    Reader wr(wj, where);
    WorkerStatus w;
    NW_RETURN_IF_ERROR(wr.String("id", &w.id, 1, kMaxIdBytes));
    NW_RETURN_IF_ERROR(wr.String("host", &w.host, 0, kMaxIdBytes));
    NW_RETURN_IF_ERROR(wr.String("device", &w.device, 0, kMaxIdBytes));
    NW_RETURN_IF_ERROR(wr.Integer("slots", &w.slots, 0, kMaxSlots));
    NW_RETURN_IF_ERROR(wr.Integer("busy", &w.busy, 0, int64_t{kMaxSlots} * 4));
    const json* backends = nullptr;
    NW_RETURN_IF_ERROR(wr.Array("backends", &backends, 64));
    for (size_t b = 0; b < backends->size(); ++b) {
      const json& v = (*backends)[b];
      if (!v.is_string() || v.get_ref<const std::string&>().size() > kMaxIdBytes) {
        return Status::InvalidArgument(where + ".backends[" + std::to_string(b) +
                                       "]: must be a string of at most " +
                                       std::to_string(kMaxIdBytes) + " bytes");
      }
      w.backends.push_back(v.get<std::string>());
    }
    if (wj.contains("slurm_job")) {
      NW_RETURN_IF_ERROR(wr.String("slurm_job", &w.slurm_job, 1, kMaxIdBytes));
    }
    if (wj.contains("node")) NW_RETURN_IF_ERROR(wr.String("node", &w.node, 1, kMaxIdBytes));
    if (wj.contains("draining")) NW_RETURN_IF_ERROR(wr.Bool("draining", &w.draining));
    if (auto g = wj.find("gpu_busy"); g != wj.end()) {
      if (!g->is_number() || !std::isfinite(g->get<double>()) || g->get<double>() < 0 ||
          g->get<double>() > 1) {
        return Status::InvalidArgument(where + ".gpu_busy: must be a number in [0, 1]");
      }
      w.gpu_busy = g->get<double>();
      NW_RETURN_IF_ERROR(
          wr.Integer("gpu_busy_ms", &w.gpu_busy_ms, 0, std::numeric_limits<int64_t>::max()));
    }
    s.workers.push_back(std::move(w));
  }
  return ControlReply(std::move(s));
}

Result<ControlReply> DecodeCampaignReply(const json& p) {
  Reader r(p, "CAMPAIGN_REPLY");
  CampaignOpReply c;
  NW_RETURN_IF_ERROR(CheckName(r, &c.campaign, false));
  NW_RETURN_IF_ERROR(r.String("state", &c.state, 1, kMaxStateBytes));
  NW_RETURN_IF_ERROR(r.Integer("queued_removed", &c.queued_removed, 0, kMaxCount));
  return ControlReply(std::move(c));
}

Result<ControlReply> DecodeError(const json& p) {
  Reader r(p, "ERROR");
  ErrorReply e;
  std::string code;
  NW_RETURN_IF_ERROR(r.String("code", &code, 1, 64));
  const auto c = StatusCodeFromName(code);
  if (!c.has_value() || *c == StatusCode::kOk) {
    return Status::InvalidArgument("ERROR.code: unknown status code '" + code + "'");
  }
  e.code = *c;
  NW_RETURN_IF_ERROR(r.String("message", &e.message, 0, kMaxMessageBytes));
  return ControlReply(std::move(e));
}

}  // namespace

std::string ControlCommandName(uint8_t byte) {
  switch (static_cast<ControlCommand>(byte)) {
    case ControlCommand::kSubmit:
      return "SUBMIT";
    case ControlCommand::kStatus:
      return "STATUS";
    case ControlCommand::kCancel:
      return "CANCEL";
    case ControlCommand::kPause:
      return "PAUSE";
    case ControlCommand::kResume:
      return "RESUME";
    case ControlCommand::kSubmitted:
      return "SUBMITTED";
    case ControlCommand::kStatusReply:
      return "STATUS_REPLY";
    case ControlCommand::kCampaignReply:
      return "CAMPAIGN_REPLY";
    case ControlCommand::kError:
      return "ERROR";
  }
  char buf[16];
  std::snprintf(buf, sizeof(buf), "UNKNOWN(0x%02x)", byte);
  return buf;
}

std::string_view CampaignOpName(CampaignOp op) {
  switch (op) {
    case CampaignOp::kCancel:
      return "cancel";
    case CampaignOp::kPause:
      return "pause";
    case CampaignOp::kResume:
      return "resume";
  }
  return "pause";
}

Result<zmq::multipart_t> EncodeControlRequest(const ControlRequest& r, const CodecLimits& limits) {
  return EncodeFrames(RequestCommand(r), RequestPayload(r), limits);
}

Result<zmq::multipart_t> EncodeControlReply(const ControlReply& r, const CodecLimits& limits) {
  return EncodeFrames(ReplyCommand(r), ReplyPayload(r), limits);
}

Result<ControlRequest> DecodeControlRequest(const zmq::multipart_t& frames,
                                            const CodecLimits& limits) {
  json payload;
  NW_ASSIGN_OR_RETURN(const uint8_t byte, Frames(frames, limits, &payload));
  const std::string name = ControlCommandName(byte);
  if (!IsRequest(byte)) return Status::InvalidArgument("control: " + name + " is not a request");
  try {
    switch (static_cast<ControlCommand>(byte)) {
      case ControlCommand::kSubmit:
        return DecodeSubmit(payload);
      case ControlCommand::kStatus: {
        Reader r(payload, name);
        StatusRequest s;
        NW_RETURN_IF_ERROR(CheckName(r, &s.campaign, true));
        return ControlRequest(std::move(s));
      }
      case ControlCommand::kCancel:
      case ControlCommand::kPause:
      case ControlCommand::kResume: {
        Reader r(payload, name);
        CampaignOpRequest c;
        c.op = byte == static_cast<uint8_t>(ControlCommand::kCancel)  ? CampaignOp::kCancel
               : byte == static_cast<uint8_t>(ControlCommand::kPause) ? CampaignOp::kPause
                                                                      : CampaignOp::kResume;
        NW_RETURN_IF_ERROR(CheckName(r, &c.campaign, false));
        return ControlRequest(std::move(c));
      }
      default:
        break;
    }
  } catch (const json::exception& e) {
    // The readers check types first; this is a last line of defence, never a crash.
    return Status::InvalidArgument(name + ": " + e.what());
  }
  return Status::InvalidArgument("control: " + name + " is not a request");
}

Result<ControlReply> DecodeControlReply(const zmq::multipart_t& frames, const CodecLimits& limits) {
  json payload;
  NW_ASSIGN_OR_RETURN(const uint8_t byte, Frames(frames, limits, &payload));
  const std::string name = ControlCommandName(byte);
  if (!IsReply(byte)) return Status::InvalidArgument("control: " + name + " is not a reply");
  try {
    switch (static_cast<ControlCommand>(byte)) {
      case ControlCommand::kSubmitted:
        return DecodeSubmitted(payload);
      case ControlCommand::kStatusReply:
        return DecodeStatusReply(payload);
      case ControlCommand::kCampaignReply:
        return DecodeCampaignReply(payload);
      case ControlCommand::kError:
        return DecodeError(payload);
      default:
        break;
    }
  } catch (const json::exception& e) {
    return Status::InvalidArgument(name + ": " + e.what());
  }
  return Status::InvalidArgument("control: " + name + " is not a reply");
}

}  // namespace nw
