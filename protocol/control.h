// The client <-> coordinator control protocol (NWC01): how `nw submit`, `nw status
// --coordinator`, `nw cancel`, `nw pause` and `nw resume` talk to a `nw coordinator` daemon.
//
// Clients use a REQ socket connected to the coordinator's ROUTER endpoint (the same endpoint the
// workers use; the version frame tells the two protocols apart). A REQ socket adds and strips the
// empty delimiter itself, so a request or reply is three frames:
//
//   ["NWC01"]   protocol version; any other version is an error, never guessed at
//   [command]   one byte, see ControlCommand
//   [payload]   a UTF-8 JSON object
//
// Every request gets exactly one reply: the reply command that matches it, or ERROR
// {code, message} (code is a StatusCodeName). A malformed request is answered with ERROR
// invalid_argument naming the field; it never stops the coordinator. Semantics are in
// docs/distributed.md.
//
// Decoding is strict in the manner of protocol/messages.h: frame count, sizes, version, command,
// JSON types and ranges are checked; unknown fields are ignored. Decode*() never throw.
// Thread-safety: values and free functions; no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>
#include <zmq_addon.hpp>

#include "common/status.h"
#include "protocol/job.h"
#include "protocol/messages.h"

namespace nw {

/// The version frame of the control protocol.
inline constexpr std::string_view kControlVersion = "NWC01";

/// Bounds on control payloads.
inline constexpr size_t kMaxJobsPerSubmitPart = 4096;
inline constexpr int kMaxSubmitParts = 1024;  // 4 M jobs: above any campaign's job ceiling
inline constexpr size_t kMaxSourceTextBytes = size_t{1} << 20;
inline constexpr size_t kMaxSourcePathBytes = 4096;
inline constexpr size_t kMaxSubmissionIdBytes = 64;
inline constexpr int kMinCampaignPriority = -1000;
inline constexpr int kMaxCampaignPriority = 1000;
inline constexpr size_t kMaxStatusEntries = 100'000;  // campaigns or workers in one reply

/// Command bytes. Never renumber: they are on the wire.
enum class ControlCommand : uint8_t {
  kSubmit = 0x41,  // client -> coordinator
  kStatus = 0x42,
  kCancel = 0x43,
  kPause = 0x44,
  kResume = 0x45,
  kSubmitted = 0x51,  // coordinator -> client
  kStatusReply = 0x52,
  kCampaignReply = 0x53,
  kError = 0x5f,
};
/// "SUBMIT", "STATUS", ... ("UNKNOWN(0x2a)" for a byte that is not a control command).
std::string ControlCommandName(uint8_t byte);

/// A campaign's boundary search (its `search: {boundary: ...}` key, docs/campaigns.md): with it,
/// a submission's jobs are the campaign's whole grid and the coordinator runs only the jobs the
/// search asks for (coordinator/search/search_driver.h). Optional on the wire (absent: a grid).
struct SubmitSearch {
  int trials = 1;                 // the campaign's trials per cell: the pool of each length, 1..
  int first_trials = 1;           // 1..trials
  double confidence = 0.95;       // (0, 1)
  double pass_rate = 0.9;         // (0, 1)
  std::optional<int64_t> budget;  // jobs per line at most, >= 1
  friend bool operator==(const SubmitSearch&, const SubmitSearch&) = default;
};

/// SUBMIT: one part of a campaign submission. A campaign's jobs travel in parts of at most
/// kMaxJobsPerSubmitPart; the coordinator stages parts 0..parts-1 of one `submission` in order
/// and writes the campaign only when the last part arrives (all or nothing). Repeating the last
/// part received (a client retry) is answered again and changes nothing.
struct SubmitRequest {
  std::string campaign;     // the campaign's name, 1..kMaxIdBytes
  std::string source_path;  // the YAML file, as the client saw it
  std::string source_text;  // the YAML text, stored with the campaign
  int priority = 0;         // kMinCampaignPriority..kMaxCampaignPriority; higher runs first
  bool rerun = false;       // run finished jobs again (like `nw run --rerun`)
  std::string submission;   // client-chosen id, the same in every part, 1..64 bytes
  int part = 0;             // 0..parts-1
  int parts = 1;            // 1..kMaxSubmitParts
  int64_t total_jobs = 0;   // jobs over all parts
  std::vector<JobSpec> jobs;
  std::optional<SubmitSearch> search;  // the same in every part; jobs are then the whole grid
};

/// STATUS: every campaign the coordinator serves (campaign empty), or one.
struct StatusRequest {
  std::string campaign;
};

enum class CampaignOp { kCancel, kPause, kResume };
std::string_view CampaignOpName(CampaignOp op);  // cancel, pause, resume

/// CANCEL / PAUSE / RESUME of one campaign by name.
struct CampaignOpRequest {
  CampaignOp op = CampaignOp::kPause;
  std::string campaign;
};

using ControlRequest = std::variant<SubmitRequest, StatusRequest, CampaignOpRequest>;

/// SUBMITTED: the reply to every SUBMIT part. `complete` on the last part, with the counts.
struct SubmitReply {
  std::string campaign;
  int part = 0;
  bool complete = false;
  int64_t campaign_id = 0;   // complete only
  int64_t jobs = 0;          // complete only: jobs of the campaign
  int64_t already_done = 0;  // complete only: of them, done before this submission
  int64_t queued = 0;        // complete only: to run now
};

/// A boundary search's progress (optional on the wire: present for search campaigns).
struct SearchStatus {
  int64_t grid_jobs = 0;       // the campaign's whole grid
  int64_t asked_jobs = 0;      // jobs the searches asked for so far (run or read from results)
  int64_t lines = 0;           // configuration x needle position
  int64_t lines_finished = 0;  // lines whose search has ended (converged, all-pass, ...)
};

struct CampaignStatus {
  std::string name;
  int64_t id = 0;
  int priority = 0;
  std::string state;  // active | paused | cancelled | finished
  int64_t total = 0, queued = 0, leased = 0, done = 0, failed = 0;
  int64_t pass = 0, miss = 0, other = 0;
  std::optional<SearchStatus> search;
};

struct WorkerStatus {
  std::string id;
  std::string host;
  std::string device;
  int slots = 0;
  int busy = 0;  // attempts it holds (running or queued locally)
  std::vector<std::string> backends;
  // Optional on the wire (absent when empty/false): a worker running as a Slurm job reports its
  // job ("JOBID", or "ARRAYJOB_TASK" for an array element) and node; draining workers take no jobs.
  std::string slurm_job;
  std::string node;
  bool draining = false;
  // Optional (absent when unknown): a GPU worker's busy fraction over the last interval it
  // reported (HEARTBEAT gpu_busy, docs/protocol.md), 0..1, and that interval's length.
  std::optional<double> gpu_busy;
  int64_t gpu_busy_ms = 0;
};

struct StatusReply {
  std::vector<CampaignStatus> campaigns;
  std::vector<WorkerStatus> workers;
};

/// CAMPAIGN_REPLY: what CANCEL / PAUSE / RESUME did.
struct CampaignOpReply {
  std::string campaign;
  std::string state;           // the campaign's state afterwards
  int64_t queued_removed = 0;  // cancel: queued jobs taken out of the schedule
};

/// ERROR: the request failed; code is the StatusCode.
struct ErrorReply {
  StatusCode code = StatusCode::kInternal;
  std::string message;
  Status ToStatus() const { return Status(code, message); }
};

using ControlReply = std::variant<SubmitReply, StatusReply, CampaignOpReply, ErrorReply>;

/// The three frames [NWC01][command][payload] of a request (a REQ socket adds the delimiter).
/// ResourceExhausted when the payload exceeds limits.max_frame_bytes.
Result<zmq::multipart_t> EncodeControlRequest(const ControlRequest& r,
                                              const CodecLimits& limits = {});
Result<zmq::multipart_t> EncodeControlReply(const ControlReply& r, const CodecLimits& limits = {});
/// Decodes [NWC01][command][payload] (the coordinator strips the routing id and delimiter first;
/// a REQ socket strips the delimiter). InvalidArgument naming the field for any malformed input,
/// including a reply command sent as a request and vice versa.
Result<ControlRequest> DecodeControlRequest(const zmq::multipart_t& frames,
                                            const CodecLimits& limits = {});
Result<ControlReply> DecodeControlReply(const zmq::multipart_t& frames,
                                        const CodecLimits& limits = {});

}  // namespace nw
