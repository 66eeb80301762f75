#include "coordinator/curve.h"

#include <sys/stat.h>
#include <zmq.h>

#include <array>
#include <chrono>
#include <fstream>
#include <future>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>
#include <zmq_addon.hpp>

namespace nw {
namespace {

constexpr size_t kZ85KeyChars = 40;
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
constexpr size_t kMaxKeyFileBytes = 1 << 20;

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return std::string(s.substr(b, e - b));
}

// "name = value" lines (and bare values, name ""), without comments and blank lines.
Result<std::vector<std::pair<std::string, std::string>>> ReadKeyLines(
    const std::filesystem::path& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return Status::NotFound("key file " + path.string() + ": " + ec.message());
  if (size > kMaxKeyFileBytes) {
    return Status::InvalidArgument("key file " + path.string() + ": larger than 1 MiB");
  }
  std::ifstream in(path);
  if (!in) return Status::IoError("key file " + path.string() + ": cannot open");
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    // Only whole-line comments: '#' is one of the Z85 characters.
    const std::string t = Trim(line);
    if (t.empty() || t[0] == '#') continue;
    const size_t eq = t.find('=');
    if (eq == std::string::npos) {
      out.emplace_back("", t);
    } else {
      out.emplace_back(Trim(std::string_view(t).substr(0, eq)),
                       Trim(std::string_view(t).substr(eq + 1)));
    }
    if (!out.back().second.empty() && !IsZ85Key(out.back().second)) {
      return Status::InvalidArgument("key file " + path.string() + ":" + std::to_string(n) +
                                     ": not a 40-character Z85 CURVE key");
    }
  }
  return out;
}

std::string PublicOf(const std::string& secret_z85) {
  std::array<char, kZ85KeyChars + 1> pub{};
  if (zmq_curve_public(pub.data(), secret_z85.c_str()) != 0) return "";
  return std::string(pub.data(), kZ85KeyChars);
}

}  // namespace

bool IsZ85Key(std::string_view key) {
  if (key.size() != kZ85KeyChars) return false;
  const std::string s(key);
  std::array<uint8_t, 32> bin{};
  return zmq_z85_decode(bin.data(), s.c_str()) != nullptr;
}

Result<CurveKeyPair> GenerateCurveKeyPair() {
  if (zmq_has("curve") == 0) {
    return Status::Unsupported("this libzmq was built without CURVE support");
  }
  std::array<char, kZ85KeyChars + 1> pub{}, sec{};
  if (zmq_curve_keypair(pub.data(), sec.data()) != 0) {
    return Status::Internal(std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno()));
  }
  return CurveKeyPair{std::string(pub.data(), kZ85KeyChars), std::string(sec.data(), kZ85KeyChars)};
}

Status WriteCurveKeyFiles(const std::filesystem::path& prefix, const CurveKeyPair& keys,
                          bool overwrite) {
  if (!IsZ85Key(keys.public_key) || !IsZ85Key(keys.secret_key)) {
    return Status::InvalidArgument("keygen: not a CURVE key pair");
  }
  const std::filesystem::path secret = prefix.string() + ".key";
  const std::filesystem::path pub = prefix.string() + ".pub";
  for (const auto& p : {secret, pub}) {
    if (!overwrite && std::filesystem::exists(p)) {
      return Status::AlreadyExists(p.string() + " exists (use --force to replace it)");
    }
  }
  {
    // Create the secret file with mode 0600 before any secret is written to it.
    std::error_code ec;
    std::filesystem::remove(secret, ec);
    std::ofstream out(secret);
    if (!out) return Status::IoError("cannot write " + secret.string());
    if (::chmod(secret.c_str(), S_IRUSR | S_IWUSR) != 0) {
      return Status::IoError("cannot make " + secret.string() + " private (chmod 600)");
    }
    out << "# needlework CURVE key pair. The secret key authenticates this host: keep it private.\n"
        << "public-key = " << keys.public_key << "\n"
        << "secret-key = " << keys.secret_key << "\n";
    if (!out.flush()) return Status::IoError("cannot write " + secret.string());
  }
  std::ofstream out(pub);
  out << "# needlework CURVE public key: give it to the coordinator's allow-list (workers and\n"
      << "# clients) or to workers and clients (--server-key) if this is the coordinator.\n"
      << "public-key = " << keys.public_key << "\n";
  if (!out.flush()) return Status::IoError("cannot write " + pub.string());
  return Status::Ok();
}

Result<CurveKeyPair> ReadCurveSecretKeyFile(const std::filesystem::path& path) {
  NW_ASSIGN_OR_RETURN(auto lines, ReadKeyLines(path));
  CurveKeyPair k;
  for (const auto& [name, value] : lines) {
    if (name == "public-key") k.public_key = value;
    if (name == "secret-key") k.secret_key = value;
  }
  if (k.secret_key.empty()) {
    return Status::InvalidArgument("key file " + path.string() +
                                   ": no 'secret-key = ...' line (is it a .pub file?)");
  }
  const std::string derived = PublicOf(k.secret_key);
  if (derived.empty()) return Status::InvalidArgument("key file " + path.string() + ": bad key");
  if (!k.public_key.empty() && k.public_key != derived) {
    return Status::InvalidArgument("key file " + path.string() +
                                   ": public-key does not belong to secret-key");
  }
  k.public_key = derived;
  return k;
}

Result<std::string> ReadCurvePublicKey(const std::string& file_or_z85) {
  if (IsZ85Key(file_or_z85) && !std::filesystem::exists(file_or_z85)) return file_or_z85;
  NW_ASSIGN_OR_RETURN(auto lines, ReadKeyLines(file_or_z85));
  for (const auto& [name, value] : lines) {
    if (name == "public-key" || name.empty()) return value;
  }
  return Status::InvalidArgument("key file " + file_or_z85 + ": no 'public-key = ...' line");
}

Result<std::set<std::string>> ReadCurveAllowList(const std::filesystem::path& path) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
      if (e.path().extension() == ".pub") files.push_back(e.path());
    }
    if (ec) return Status::IoError("allow-list " + path.string() + ": " + ec.message());
  } else {
    files.push_back(path);
  }
  std::set<std::string> keys;
  for (const auto& f : files) {
    NW_ASSIGN_OR_RETURN(auto lines, ReadKeyLines(f));
    for (const auto& [name, value] : lines) {
      if (name == "public-key" || name.empty()) keys.insert(value);
      if (name == "secret-key") {
        return Status::InvalidArgument("allow-list " + f.string() +
                                       " holds a secret key; list public keys (.pub) only");
      }
    }
  }
  if (keys.empty()) {
    return Status::InvalidArgument("allow-list " + path.string() + ": no public keys");
  }
  return keys;
}

bool IsLocalOnlyEndpoint(std::string_view endpoint) {
  if (endpoint.rfind("inproc://", 0) == 0 || endpoint.rfind("ipc://", 0) == 0) return true;
  if (endpoint.rfind("tcp://", 0) != 0) return false;
  std::string_view host = endpoint.substr(6);
  // tcp://[::1]:P, tcp://HOST:P; an interface;address form (source;dest) is never local-only.
  if (host.find(';') != std::string_view::npos) return false;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return false;
    return host.substr(1, close - 1) == "::1";
  }
  const size_t colon = host.rfind(':');
  if (colon == std::string_view::npos) return false;
  host = host.substr(0, colon);
  if (host == "localhost") return true;
  // 127.0.0.0/8, written as four decimal numbers.
  if (host.rfind("127.", 0) != 0) return false;
  int parts = 0;
  size_t i = 0;
  while (i <= host.size()) {
    size_t j = host.find('.', i);
    if (j == std::string_view::npos) j = host.size();
    const std::string_view part = host.substr(i, j - i);
    if (part.empty() || part.size() > 3) return false;
    int v = 0;
    for (char ch : part) {
      if (ch < '0' || ch > '9') return false;
      v = v * 10 + (ch - '0');
    }
    if (v > 255) return false;
    ++parts;
    i = j + 1;
  }
  return parts == 4;
}

// ---- ZapHandler --------------------------------------------------------------------------------

ZapHandler::ZapHandler(PassKey, std::set<std::string> allowed,
                       std::function<void(std::string_view)> log)
    : allowed_(std::move(allowed)), log_(std::move(log)) {}

Result<std::unique_ptr<ZapHandler>> ZapHandler::Start(zmq::context_t& context,
                                                      std::set<std::string> allowed_z85,
                                                      std::function<void(std::string_view)> log) {
  if (allowed_z85.empty()) return Status::InvalidArgument("zap: empty allow-list");
  for (const auto& k : allowed_z85) {
    if (!IsZ85Key(k)) return Status::InvalidArgument("zap: allow-list entry is not a Z85 key");
  }
  auto h = std::make_unique<ZapHandler>(PassKey(), std::move(allowed_z85), std::move(log));
  std::promise<Status> bound;
  std::future<Status> ready = bound.get_future();
  ZapHandler* self = h.get();
  h->thread_ = std::thread([self, &context, &bound] { self->Main(context, bound); });
  Status st = ready.get();
  if (!st.ok()) {
    h->thread_.join();
    return st;
  }
  return h;
}

ZapHandler::~ZapHandler() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void ZapHandler::Main(zmq::context_t& context, std::promise<Status>& bound) {
  bool announced = false;  // `bound` must not be touched once set
  try {
    zmq::socket_t rep(context, zmq::socket_type::rep);
    rep.set(zmq::sockopt::linger, 0);
    rep.bind(kZapEndpoint);
    bound.set_value(Status::Ok());
    announced = true;
    Serve(rep);
  } catch (const zmq::error_t& e) {
    if (!announced) {
      bound.set_value(
          Status::Unavailable(std::string("zap: cannot bind ") + kZapEndpoint + ": " + e.what()));
    } else if (log_) {
      log_(std::string("coordinator: ZAP handler stopped: ") + e.what());
    }
  }
}

void ZapHandler::Serve(zmq::socket_t& rep) {
  std::vector<zmq_pollitem_t> items = {{rep.handle(), 0, ZMQ_POLLIN, 0}};
  while (!stop_.load()) {
    zmq::poll(items, std::chrono::milliseconds(50));
    if ((items[0].revents & ZMQ_POLLIN) == 0) continue;
    zmq::multipart_t req;
    if (!req.recv(rep, ZMQ_DONTWAIT)) continue;
    // RFC 27: version, request id, domain, address, identity, mechanism, credentials...
    std::string request_id;
    std::string status = "400";
    std::string text = "malformed ZAP request";
    std::string user;
    if (req.size() >= 6 && req[0].to_string_view() == "1.0") {
      request_id = std::string(req[1].to_string_view());
      const std::string address(req[3].to_string_view());
      const std::string mechanism(req[5].to_string_view());
      if (mechanism == "CURVE" && req.size() >= 7 && req[6].size() == 32) {
        std::array<char, kZ85KeyChars + 1> z85{};
        zmq_z85_encode(z85.data(), static_cast<const uint8_t*>(req[6].data()), 32);
        const std::string key(z85.data(), kZ85KeyChars);
        if (allowed_.count(key) != 0) {
          status = "200";
          text = "OK";
          user = key;
          accepted_++;
        } else {
          text = "client key not on the allow-list";
          denied_++;
          if (log_) log_("coordinator: denied CURVE client " + key + " from " + address);
        }
      } else {
        text = "mechanism " + mechanism + " not allowed (CURVE required)";
        denied_++;
        if (log_) log_("coordinator: denied " + mechanism + " connection from " + address);
      }
    }
    zmq::multipart_t reply;
    reply.addstr("1.0");
    reply.addstr(request_id);
    reply.addstr(status);
    reply.addstr(text);
    reply.addstr(user);
    reply.addstr("");
    reply.send(rep);
  }
}

}  // namespace nw
