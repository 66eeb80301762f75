#include "protocol/wire.h"

#include <algorithm>
#include <cstdio>

namespace nw {

std::string CommandName(uint8_t byte) {
  switch (static_cast<Command>(byte)) {
    case Command::kReady:
      return "READY";
    case Command::kJob:
      return "JOB";
    case Command::kResult:
      return "RESULT";
    case Command::kAck:
      return "ACK";
    case Command::kHeartbeat:
      return "HEARTBEAT";
    case Command::kDisconnect:
      return "DISCONNECT";
  }
  char buf[16];
  std::snprintf(buf, sizeof(buf), "UNKNOWN(0x%02x)", byte);
  return buf;
}

bool IsWorkerCommand(Command c) {
  return c == Command::kReady || c == Command::kHeartbeat || c == Command::kResult ||
         c == Command::kDisconnect;
}

bool IsCoordinatorCommand(Command c) {
  return c == Command::kJob || c == Command::kAck || c == Command::kHeartbeat ||
         c == Command::kDisconnect;
}

std::string_view AckStatusName(AckStatus s) {
  switch (s) {
    case AckStatus::kCommitted:
      return "committed";
    case AckStatus::kDuplicate:
      return "duplicate";
    case AckStatus::kRejected:
      return "rejected";
    case AckStatus::kFailed:
      return "failed";
  }
  return "rejected";
}

Result<AckStatus> ParseAckStatus(std::string_view name) {
  for (AckStatus s :
       {AckStatus::kCommitted, AckStatus::kDuplicate, AckStatus::kRejected, AckStatus::kFailed}) {
    if (AckStatusName(s) == name) return s;
  }
  return Status::InvalidArgument("unknown ack status '" + std::string(name) + "'");
}

Command CommandOf(const Message& m) {
  struct Visitor {
    Command operator()(const ReadyMsg&) const { return Command::kReady; }
    Command operator()(const JobMsg&) const { return Command::kJob; }
    Command operator()(const ResultMsg&) const { return Command::kResult; }
    Command operator()(const AckMsg&) const { return Command::kAck; }
    Command operator()(const HeartbeatMsg&) const { return Command::kHeartbeat; }
    Command operator()(const DisconnectMsg&) const { return Command::kDisconnect; }
  };
  return std::visit(Visitor{}, m);
}

std::string LogSafe(std::string_view text, size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  const size_t n = std::min(text.size(), max_bytes);
  out.reserve(n + 16);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (text.size() > max_bytes) out += "...(" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace nw
