// The NWW01 wire types (protocol/messages.h describes the protocol): the commands, the messages
// as C++ values, their bounds, and the helpers that need no socket. Free of ZeroMQ, so the
// coordinator's Scheduler (coordinator/scheduler.h) compiles without it; the codec (frames,
// Encode/Decode) is protocol/messages.h.
// Thread-safety: values and free functions; no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "protocol/job.h"

namespace nw {

/// The version frame. A change of frames, commands or required fields bumps it.
inline constexpr std::string_view kProtocolVersion = "NWW01";

/// Default bound on any one frame (and so on any payload); configurable per socket.
inline constexpr size_t kDefaultMaxFrameBytes = size_t{16} << 20;
/// Bounds on identifiers and counts inside payloads.
inline constexpr size_t kMaxIdBytes = 256;
inline constexpr int kMaxSlots = 1024;
/// Bound on the optional capability lists (`models`, `engine_versions`).
inline constexpr size_t kMaxCapabilityList = 1024;

/// Command bytes. Never renumber: they are on the wire.
enum class Command : uint8_t {
  kReady = 0x01,       // worker -> coordinator
  kJob = 0x02,         // coordinator -> worker
  kResult = 0x03,      // worker -> coordinator
  kAck = 0x04,         // coordinator -> worker
  kHeartbeat = 0x05,   // both ways
  kDisconnect = 0x06,  // both ways
};

/// "READY", "JOB", ... ("UNKNOWN(0x2a)" for a byte that is not a command).
std::string CommandName(uint8_t byte);
inline std::string CommandName(Command c) { return CommandName(static_cast<uint8_t>(c)); }
/// Whether a worker may send it (READY, HEARTBEAT, RESULT, DISCONNECT).
bool IsWorkerCommand(Command c);
/// Whether a coordinator may send it (JOB, ACK, HEARTBEAT, DISCONNECT).
bool IsCoordinatorCommand(Command c);

/// One attempt of one job: the unit of leasing and fencing.
struct AttemptRef {
  std::string job_key;
  int attempt = 0;
  friend bool operator==(const AttemptRef&, const AttemptRef&) = default;
  friend auto operator<=>(const AttemptRef&, const AttemptRef&) = default;
};

/// READY: a worker (re)registers. `held` lists the attempts it still runs or has results for
/// that are not yet ACKed, so a reconnecting worker keeps its leases (docs/protocol.md).
///
/// capabilities: an object. `backends` (non-empty strings) is required. Optional keys the
/// coordinator matches on, checked by Decode() when present: `prefetch` (0..3 x kMaxSlots: jobs
/// it queues locally beyond its slots), `models` (model digests it may load; absent = any) and
/// `engine_versions` (engine versions it runs; absent = any). Other keys (device, gpu, memory)
/// are stored and shown, never matched.
struct ReadyMsg {
  std::string worker_id;        // unique per worker process; 1..kMaxIdBytes bytes
  std::string host;             // informational
  int slots = 1;                // jobs it runs at once, 1..kMaxSlots
  nlohmann::json capabilities;  // see above
  std::vector<AttemptRef> held;
};

/// JOB: a lease of one attempt of one job. lease_ms is the attempt's time limit; the wall-clock
/// deadline is informational (clocks of two hosts need not agree).
struct JobMsg {
  std::string job_key;
  int attempt = 0;       // >= 1
  int64_t lease_ms = 0;  // > 0
  int64_t lease_expires_wall_ms = 0;
  JobSpec spec;
};

/// RESULT: the result of one attempt (job key and attempt are inside the JobResult).
struct ResultMsg {
  JobResult result;
};

/// What the coordinator did with a RESULT. The worker forgets the result on any ACK.
enum class AckStatus {
  kCommitted,  // written to the database (before this ACK was sent)
  kDuplicate,  // this attempt's result was already committed
  kRejected,   // superseded attempt (fenced), unknown job: not written
  kFailed,     // recorded as a failed attempt (retryable engine error); the job may rerun
};
std::string_view AckStatusName(AckStatus s);  // committed, duplicate, rejected, failed
Result<AckStatus> ParseAckStatus(std::string_view name);

struct AckMsg {
  std::string job_key;
  int attempt = 0;
  AckStatus status = AckStatus::kCommitted;
  std::string reason;  // why, for rejected/failed; may be empty
};

/// HEARTBEAT. A GPU worker that measures its GPU (NVML) adds, every so often, the GPU's busy
/// fraction over the interval since its last report: gpu_busy (0..1) over gpu_busy_ms
/// milliseconds. Optional fields (docs/protocol.md): `{}` otherwise, as every heartbeat of the
/// coordinator.
struct HeartbeatMsg {
  std::optional<double> gpu_busy;
  int64_t gpu_busy_ms = 0;  // the interval gpu_busy covers (with gpu_busy only)
};

/// DISCONNECT. From a worker: it leaves (its leases are requeued at once). From the coordinator:
/// reconnect == false means "exit" (campaign finished, coordinator stopping); reconnect == true
/// means "I do not know you, send READY again" (e.g. after a coordinator restart).
struct DisconnectMsg {
  std::string reason;
  bool reconnect = false;
};

using Message = std::variant<ReadyMsg, JobMsg, ResultMsg, AckMsg, HeartbeatMsg, DisconnectMsg>;

/// The command of a message.
Command CommandOf(const Message& m);

/// A peer's text made safe for a log line: control bytes (newline, carriage return, ESC, ...)
/// and DEL become \xNN, and the text is cut at `max_bytes` (then "...(N bytes)"), so no peer can
/// forge log lines, move the terminal's cursor or flood the log with one string.
std::string LogSafe(std::string_view text, size_t max_bytes = 4096);

/// Bound on the serialized READY capabilities object (its lists are bounded too).
inline constexpr size_t kMaxCapabilityBytes = 256 * 1024;

}  // namespace nw
