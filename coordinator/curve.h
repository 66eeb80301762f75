// CURVE security for the coordinator's endpoint: key files (`nw keygen`), the allow-list of
// client keys, the ZAP handler that enforces it, and the loopback rule for endpoints without
// keys. Semantics in docs/distributed.md ("Security").
//
// Key files are text, one "name = value" per line; a line starting with '#' is a comment:
//   NAME.key   public-key = <Z85>  and  secret-key = <Z85>   (mode 0600; keep it private)
//   NAME.pub   public-key = <Z85>
// An allow-list is a file of public keys (NAME.pub files concatenated, or one Z85 key per line)
// or a directory whose *.pub files are read.
//
// Thread-safety: free functions are pure or touch only the files named. ZapHandler owns one
// thread, which alone uses its REP socket; the object's methods may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <zmq.hpp>

#include "common/status.h"

namespace nw {

/// A CURVE key pair in Z85 (40 characters each).
struct CurveKeyPair {
  std::string public_key;
  std::string secret_key;
};

/// True for a 40-character Z85 string that decodes to 32 bytes.
bool IsZ85Key(std::string_view key);
/// A fresh key pair (libzmq with libsodium). Unsupported if libzmq was built without CURVE.
Result<CurveKeyPair> GenerateCurveKeyPair();
/// Writes PREFIX.key (both keys, mode 0600) and PREFIX.pub. AlreadyExists unless `overwrite`.
Status WriteCurveKeyFiles(const std::filesystem::path& prefix, const CurveKeyPair& keys,
                          bool overwrite);
/// Reads a NAME.key file: both keys, checked to belong together.
Result<CurveKeyPair> ReadCurveSecretKeyFile(const std::filesystem::path& path);
/// A public key given as a NAME.pub (or NAME.key) file, or as the Z85 text itself.
Result<std::string> ReadCurvePublicKey(const std::string& file_or_z85);
/// The allow-list: a file of public keys or a directory of *.pub files. Empty is an error.
Result<std::set<std::string>> ReadCurveAllowList(const std::filesystem::path& path);

/// True when `endpoint` can only be reached from this host: inproc://, ipc://, and tcp:// on
/// 127.0.0.0/8, ::1 or localhost. tcp://*:P, 0.0.0.0 and other addresses are not.
bool IsLocalOnlyEndpoint(std::string_view endpoint);

/// The ZAP handler (RFC 27) of one zmq::context_t: accepts a CURVE client whose public key is on
/// the allow-list and denies every other handshake. Start it before the server socket binds;
/// libzmq consults it for every CURVE connection in that context. One per context.
class ZapHandler {
 public:
  /// Binds inproc://zeromq.zap.01 on a thread of its own. Errors: the endpoint is taken (another
  /// handler in this context), an empty allow-list. `log` is called from the handler's thread
  /// (denied handshakes), so it must be thread-safe.
  static Result<std::unique_ptr<ZapHandler>> Start(zmq::context_t& context,
                                                   std::set<std::string> allowed_z85,
                                                   std::function<void(std::string_view)> log);
  /// Stops and joins the thread.
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  int64_t accepted() const { return accepted_.load(); }
  int64_t denied() const { return denied_.load(); }

 private:
  struct PassKey {
    explicit PassKey() = default;
  };

 public:
  /// Use Start().
  ZapHandler(PassKey, std::set<std::string> allowed, std::function<void(std::string_view)> log);

 private:
  void Main(zmq::context_t& context, std::promise<Status>& bound);
  void Serve(zmq::socket_t& rep);

  const std::set<std::string> allowed_;
  const std::function<void(std::string_view)> log_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> accepted_{0};
  std::atomic<int64_t> denied_{0};
  std::thread thread_;
};

}  // namespace nw
