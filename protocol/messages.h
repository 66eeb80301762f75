// The coordinator <-> worker wire protocol (NWW01), after zguide's Majordomo: the ZeroMQ codec.
// The messages as C++ values (commands, ReadyMsg, JobMsg, ...) are protocol/wire.h, which needs
// no ZeroMQ; this header adds the frames.
//
// Every message is four frames after any ROUTER routing identity:
//
//   [""]        empty delimiter (the worker's DEALER sends it; the ROUTER keeps it after the id)
//   ["NWW01"]   protocol version; a peer speaking another version is dropped, never guessed at
//   [command]   one byte, see Command
//   [payload]   a UTF-8 JSON object (an empty object "{}" when the command carries nothing)
//
// Worker -> coordinator: READY, HEARTBEAT, RESULT, DISCONNECT.
// Coordinator -> worker: JOB, ACK, HEARTBEAT, DISCONNECT.
// Timing, leases, fencing and retries are described in docs/protocol.md.
//
// Decode() never throws and never trusts its input: every malformed message (wrong frame count,
// wrong version, unknown command, oversize frame, bad JSON, missing or mistyped field) comes back
// as an InvalidArgument Status naming the message and field ("RESULT.result.attempt: missing").
// Thread-safety: values and free functions; no shared state.
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/status.h"
#include "protocol/wire.h"

namespace nw {

struct CodecLimits {
  size_t max_frame_bytes = kDefaultMaxFrameBytes;
};

/// Encodes [""][NWW01][command][payload]. Fails (ResourceExhausted) when the payload would exceed
/// limits.max_frame_bytes, naming the message.
Result<zmq::multipart_t> Encode(const Message& m, const CodecLimits& limits = {});

/// Decodes the four frames [""][NWW01][command][payload] (a ROUTER strips the routing identity
/// first). Every malformed input is an InvalidArgument naming the message and field.
Result<Message> Decode(const zmq::multipart_t& frames, const CodecLimits& limits = {});

/// The JSON payload of a message (what Encode puts in the fourth frame).
nlohmann::json PayloadOf(const Message& m);

/// Printable form of a routing identity (hex), for logs.
std::string HexId(const zmq::message_t& id);

}  // namespace nw
