#include "coordinator/control_client.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>

#include "coordinator/curve.h"
#include "protocol/zmq_handoff.h"

namespace nw {
namespace {

std::string RandomId() {
  std::random_device rd;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 4; ++i) {
    uint32_t v = rd();
    for (int j = 0; j < 8; ++j) out.push_back(kHex[(v >> (4 * j)) & 15]);
  }
  return out;
}

template <typename T>
Result<T> Expect(Result<ControlReply> reply, const char* what) {
  if (!reply.ok()) return reply.status();
  if (auto* e = std::get_if<ErrorReply>(&*reply)) return e->ToStatus();
  if (auto* t = std::get_if<T>(&*reply)) return std::move(*t);
  return Status::Internal(std::string("coordinator answered ") + what + " with another reply");
}

}  // namespace

Result<ControlClientOptions> ClientOptionsFromFlags(const std::string& endpoint,
                                                    const std::string& server_key,
                                                    const std::string& key_file,
                                                    int64_t timeout_ms) {
  if (endpoint.empty()) {
    return Status::InvalidArgument(
        "no coordinator: give --coordinator tcp://HOST:PORT (or set "
        "NW_COORDINATOR)");
  }
  if (timeout_ms <= 0) return Status::InvalidArgument("--timeout-ms must be positive");
  ControlClientOptions o;
  o.endpoint = endpoint;
  o.timeout_ms = timeout_ms;
  if (server_key.empty() != key_file.empty()) {
    return Status::InvalidArgument(
        "CURVE needs both --server-key (the coordinator's public key) "
        "and --curve-key (this client's key pair)");
  }
  if (!server_key.empty()) {
    NW_ASSIGN_OR_RETURN(o.curve_server_key, ReadCurvePublicKey(server_key));
    NW_ASSIGN_OR_RETURN(CurveKeyPair mine, ReadCurveSecretKeyFile(key_file));
    o.curve_public_key = mine.public_key;
    o.curve_secret_key = mine.secret_key;
  }
  return o;
}

ControlClient::ControlClient(zmq::context_t& context, ControlClientOptions options)
    : context_(context), options_(std::move(options)) {}

Result<ControlReply> ControlClient::Call(
    const ControlRequest& request, int64_t timeout_ms,
    std::optional<std::chrono::steady_clock::time_point> deadline) {
  const CodecLimits limits{options_.max_frame_bytes};
  NW_ASSIGN_OR_RETURN(zmq::multipart_t encoded, EncodeControlRequest(request, limits));
  const bool curve = !options_.curve_server_key.empty();
  if (curve && (options_.curve_public_key.empty() || options_.curve_secret_key.empty())) {
    return Status::InvalidArgument("control: CURVE needs this client's key pair too");
  }
  const int tries = std::max(1, options_.tries);
  try {
    for (int attempt = 1; attempt <= tries; ++attempt) {
      int64_t wait_ms = timeout_ms;
      if (deadline) {
        const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 *deadline - std::chrono::steady_clock::now())
                                 .count();
        if (left <= 0) {
          return Status::DeadlineExceeded("no reply from a coordinator at " + options_.endpoint +
                                          " before the deadline (" + std::to_string(attempt - 1) +
                                          " tries)");
        }
        wait_ms = std::min(wait_ms, left);
      }
      zmq::socket_t req(context_, zmq::socket_type::req);
      req.set(zmq::sockopt::linger, 0);
      req.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options_.max_frame_bytes));
      if (curve) {
        req.set(zmq::sockopt::curve_serverkey, options_.curve_server_key);
        req.set(zmq::sockopt::curve_publickey, options_.curve_public_key);
        req.set(zmq::sockopt::curve_secretkey, options_.curve_secret_key);
      }
      req.connect(options_.endpoint);
      // connect() makes the pipe at once (ZMQ_IMMEDIATE is off), so this only queues.
      zmq::multipart_t out = encoded.clone();
      if (!SendFrames(out, req, ZMQ_DONTWAIT)) continue;
      std::vector<zmq_pollitem_t> items = {{req.handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, std::chrono::milliseconds(std::max<int64_t>(1, wait_ms)));
      if ((items[0].revents & ZMQ_POLLIN) == 0) continue;
      zmq::multipart_t in;
      if (!RecvFrames(in, req, ZMQ_DONTWAIT)) continue;
      auto reply = DecodeControlReply(in, limits);
      if (!reply.ok()) return reply.status().WithContext("reply from " + options_.endpoint);
      return reply;
    }
  } catch (const zmq::error_t& e) {
    return Status::Unavailable("control: ZeroMQ error on " + options_.endpoint + ": " + e.what());
  }
  return Status::Unavailable("no reply from a coordinator at " + options_.endpoint + " after " +
                             std::to_string(tries) + " tries of " + std::to_string(timeout_ms) +
                             " ms" +
                             (curve ? " (with CURVE: check the server key and that this "
                                      "client's public key is on its allow-list)"
                                    : ""));
}

Result<SubmitReply> ControlClient::Submit(const Submission& s,
                                          const std::function<void(int, int)>& on_part) {
  const size_t per_part = kMaxJobsPerSubmitPart;
  const size_t parts = std::max<size_t>(1, (s.jobs.size() + per_part - 1) / per_part);
  if (parts > static_cast<size_t>(kMaxSubmitParts)) {
    return Status::InvalidArgument("submit: " + std::to_string(s.jobs.size()) +
                                   " jobs are more than one submission may carry");
  }
  const std::string id = RandomId();
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (options_.total_timeout_ms > 0) {
    deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.total_timeout_ms);
  }
  Result<SubmitReply> last = Status::Internal("submit: nothing sent");
  for (size_t p = 0; p < parts; ++p) {
    SubmitRequest r;
    r.campaign = s.campaign;
    r.source_path = s.source_path;
    r.source_text = s.source_text;
    r.priority = s.priority;
    r.rerun = s.rerun;
    r.search = s.search;
    r.submission = id;
    r.part = static_cast<int>(p);
    r.parts = static_cast<int>(parts);
    r.total_jobs = static_cast<int64_t>(s.jobs.size());
    const size_t begin = p * per_part;
    const size_t end = std::min(s.jobs.size(), begin + per_part);
    r.jobs.assign(s.jobs.begin() + static_cast<std::ptrdiff_t>(begin),
                  s.jobs.begin() + static_cast<std::ptrdiff_t>(end));
    const bool final_part = p + 1 == parts;
    last = Expect<SubmitReply>(
        Call(r, final_part ? options_.commit_timeout_ms : options_.timeout_ms, deadline), "SUBMIT");
    if (!last.ok()) {
      Status st = last.status().WithContext("submit part " + std::to_string(p + 1) + " of " +
                                            std::to_string(parts));
      if (st.code() == StatusCode::kDeadlineExceeded) {
        st = Status(st.code(), st.message() + ": the whole submission is limited to " +
                                   std::to_string(options_.total_timeout_ms) + " ms" +
                                   (final_part ? " (the coordinator may still write the campaign; "
                                                 "`nw status` shows whether it did)"
                                               : " (nothing was written)"));
      }
      return st;
    }
    if (on_part) on_part(static_cast<int>(p + 1), static_cast<int>(parts));
  }
  if (!last->complete) return Status::Internal("submit: the coordinator did not complete it");
  return last;
}

Result<StatusReply> ControlClient::QueryStatus(const std::string& campaign) {
  return Expect<StatusReply>(Call(StatusRequest{campaign}, options_.timeout_ms), "STATUS");
}

Result<CampaignOpReply> ControlClient::Op(CampaignOp op, const std::string& campaign) {
  return Expect<CampaignOpReply>(Call(CampaignOpRequest{op, campaign}, options_.timeout_ms),
                                 std::string(CampaignOpName(op)).c_str());
}

}  // namespace nw
