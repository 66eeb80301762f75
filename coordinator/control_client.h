// ControlClient: the client side of the control protocol (protocol/control.h), used by
// `nw submit`, `nw status --coordinator`, `nw cancel`, `nw pause` and `nw resume`.
//
// Each call is Lazy Pirate (zguide ch. 4): a REQ socket sends the request and polls for the
// reply; on a timeout the socket is closed and a fresh one resends, up to `tries` times, then the
// call fails with Unavailable naming the endpoint. Every request is safe to repeat: SUBMIT parts
// are idempotent by (submission, part), STATUS reads, and CANCEL / PAUSE / RESUME set a state.
// An ERROR reply comes back as its Status.
//
// Thread-safety: one ControlClient per thread; the zmq::context_t is borrowed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/status.h"
#include "protocol/control.h"

namespace nw {

struct ControlClientOptions {
  std::string endpoint;       // the coordinator's endpoint (tcp://HOST:PORT)
  int64_t timeout_ms = 5000;  // per try
  int tries = 3;
  /// A submission's last part waits this long per try: the coordinator writes the whole
  /// campaign before it answers.
  int64_t commit_timeout_ms = 120'000;
  /// > 0: Submit() as a whole (every part, every try, the final commit) ends within this long,
  /// with DeadlineExceeded naming the part it reached (`nw submit --timeout-ms`).
  int64_t total_timeout_ms = 0;
  size_t max_frame_bytes = kDefaultMaxFrameBytes;
  /// CURVE: the coordinator's public key and this client's key pair (Z85), all or none.
  std::string curve_server_key;
  std::string curve_public_key;
  std::string curve_secret_key;
};

/// Options from the command line: the endpoint, and for CURVE the coordinator's public key
/// (a NAME.pub file or the Z85 text) and this client's key pair file (NAME.key).
Result<ControlClientOptions> ClientOptionsFromFlags(const std::string& endpoint,
                                                    const std::string& server_key,
                                                    const std::string& key_file,
                                                    int64_t timeout_ms);

/// What `nw submit` sends: one campaign, expanded by the client.
struct Submission {
  std::string campaign;
  std::string source_path;
  std::string source_text;
  int priority = 0;
  bool rerun = false;
  std::vector<JobSpec> jobs;  // with `search`: the campaign's whole grid
  std::optional<SubmitSearch> search;
};

class ControlClient {
 public:
  ControlClient(zmq::context_t& context, ControlClientOptions options);
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  /// Sends the submission in parts of kMaxJobsPerSubmitPart jobs; `on_part(sent, parts)` after
  /// each part. Returns the final reply.
  Result<SubmitReply> Submit(const Submission& s,
                             const std::function<void(int, int)>& on_part = nullptr);
  Result<StatusReply> QueryStatus(const std::string& campaign);
  Result<CampaignOpReply> Op(CampaignOp op, const std::string& campaign);
  /// One request, one reply (with retries). ERROR replies are returned as a value. With a
  /// deadline, no try waits past it, and none starts after it (DeadlineExceeded).
  Result<ControlReply> Call(const ControlRequest& request, int64_t timeout_ms,
                            std::optional<std::chrono::steady_clock::time_point> deadline = {});

 private:
  zmq::context_t& context_;
  ControlClientOptions options_;
};

}  // namespace nw
