#include "http/server.h"

#include <malloc.h>
#include <sodium.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "common/listen_address.h"
#include "engine/engine.h"
#include "http/batch_scheduler.h"
#include "http/openai.h"

namespace nw {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;

// Types of this file only; named (not anonymous) because HttpServer::Impl holds them.
namespace serve_detail {

struct Reply {
  int status = 200;
  json body;
  std::vector<std::pair<std::string, std::string>> headers;
  int64_t prompt_tokens = -1;  // for the access log (-1: none)
  int64_t completion_tokens = -1;
};

// Part of a streamed answer: server-sent events, the last ones ending the stream.
struct StreamEvents {
  std::string data;
  bool last = false;
  int64_t prompt_tokens = -1;  // with `last`, for the access log
  int64_t completion_tokens = -1;
};

Reply ErrorReply(const ApiError& e) {
  Reply r;
  r.status = e.status;
  r.body = e.Body();
  return r;
}

Reply Error(int status, std::string type, std::string message, std::string code = "") {
  ApiError e;
  e.status = status;
  e.type = std::move(type);
  e.message = std::move(message);
  e.code = std::move(code);
  return ErrorReply(e);
}

// One generation request on its way through the scheduler. The scheduler thread prepares it
// when it is admitted and answers through `done` once, unless the request was cancelled first
// (its deadline passed, the client went away, or the server stopped).
// A streaming request (request.stream) sends its events through `stream` as its tokens come
// (Progress) and at the end (Finish); `done` then answers only an error that comes before the
// first event (so it still gets its HTTP status).
struct Task final : BatchJob {
  HttpServer::Impl* impl = nullptr;
  ApiKind kind = ApiKind::kCompletions;
  CompletionRequest request;
  std::string id;
  int64_t created_s = 0;  // when the request arrived (the responses' "created")
  std::function<void(Reply)> done;
  std::function<void(StreamEvents)> stream;
  bool stream_started = false;  // scheduler thread: an event went out
  size_t streamed_bytes = 0;    // scheduler thread: text bytes sent

  Result<ServeRequest> Prepare() override;
  void Finish(const ServeRequest& sr, Result<ServeResult> result) override;
  void Progress(const ServeGeneration& generation) override;

 private:
  // The chat stream's first chunk (the role), when nothing went out yet.
  std::string RoleChunk();
  std::string TextChunk(const std::string& text);
};

class Session;

}  // namespace serve_detail

using serve_detail::Error;
using serve_detail::ErrorReply;
using serve_detail::Reply;
using serve_detail::Session;
using serve_detail::Task;

namespace {

// After a body at least this large is released, free heap pages go back to the system.
constexpr size_t kTrimAfterBytes = 1 << 20;

// JSON bodies nest at most this deep (a request has 3 or 4 levels).
constexpr int kMaxJsonNesting = 64;

// Whether `text`'s brackets nest at most `max` deep, outside strings: one linear pass, so a
// body of a million '[' is refused before any parser recurses or allocates for it.
bool JsonNestingWithin(std::string_view text, int max) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

std::string Ms(double ms) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), ms, std::chars_format::fixed, 3);
  return std::string(buf, r.ptr);
}

// A path segment with %XX escapes decoded (the SDKs escape "/" in model ids); nullopt when an
// escape is malformed.
std::optional<std::string> PercentDecode(std::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    unsigned value = 0;
    if (i + 2 >= in.size()) return std::nullopt;
    auto r = std::from_chars(in.data() + i + 1, in.data() + i + 3, value, 16);
    if (r.ec != std::errc() || r.ptr != in.data() + i + 3) return std::nullopt;
    out += static_cast<char>(value);
    i += 2;
  }
  return out;
}

// Peer-supplied text for a log line: printable ASCII only (others become '?'), at most 200 bytes.
std::string ForLog(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 200)) {
    out += (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') ? c : '?';
  }
  if (text.size() > 200) out += "...";
  return out;
}

// "2026-12-01T21:30:00.123Z"
std::string UtcNow() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

using KeyDigest = std::array<unsigned char, crypto_generichash_BYTES>;

KeyDigest DigestKey(std::string_view key) {
  KeyDigest d{};
  crypto_generichash(d.data(), d.size(), reinterpret_cast<const unsigned char*>(key.data()),
                     key.size(), nullptr, 0);
  return d;
}

// 16 hex digits from the system's random source: ids stay unique across restarts.
std::string RandomHex() {
  std::array<unsigned char, 8> bytes{};
  randombytes_buf(bytes.data(), bytes.size());
  std::string out;
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

}  // namespace

struct HttpServer::Impl {
  // The io_context is declared first so that it is destroyed last: handlers it still holds own
  // sessions, whose sockets belong to it.
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  tcp::acceptor acceptor{ioc};
  HttpServerOptions options;
  std::unique_ptr<ServeModel> model;
  // Parses request bodies (JSON, validation) off the I/O thread; declared after `ioc` so that it
  // is joined and destroyed first (its handlers hold sessions).
  asio::thread_pool parse_pool{1};
  std::string model_name;
  int64_t created_s = 0;             // when the model was loaded (/v1/models)
  std::string id_prefix;             // random per server: ids never repeat across restarts
  std::optional<KeyDigest> api_key;  // BLAKE2b of --api-key; none = no key needed
  uint16_t port = 0;
  std::string host;
  RequestLimits limits;

  std::unique_ptr<BatchScheduler> scheduler;  // owns the engine thread

  std::vector<std::weak_ptr<Session>> sessions;  // I/O thread only (and Stop, after it ended)
  std::atomic<bool> stopped{false};
  std::atomic<uint64_t> next_id{1};
  std::atomic<int64_t> n_connections{0}, n_requests{0}, n_completions{0}, n_busy{0}, n_timed_out{0},
      n_client_errors{0}, n_disconnected{0}, n_evicted{0};
  std::mt19937_64 seeds{std::random_device{}()};  // scheduler thread: seeds of unseeded requests

  std::thread io_thread;

  void Log(std::string_view line) const {
    if (options.log) options.log(line);
  }
  // Whether an Authorization header carries the API key: compared in constant time, as digests
  // (so the key's length does not show either).
  bool Authorized(beast::string_view authorization) const {
    if (!api_key) return true;
    constexpr std::string_view kBearer = "Bearer ";
    std::string_view given(authorization.data(), authorization.size());
    if (given.size() >= kBearer.size() &&
        beast::iequals(beast::string_view(given.data(), kBearer.size()), "Bearer ")) {
      given.remove_prefix(kBearer.size());
    } else {
      given = {};
    }
    const KeyDigest d = DigestKey(given);
    return sodium_memcmp(d.data(), api_key->data(), d.size()) == 0;
  }
  json ModelObject() const {
    const ModelConfig& cfg = model->config();
    return json{{"id", model_name},
                {"object", "model"},
                {"created", created_s},
                {"owned_by", "needlework"},
                {"root", model->model_digest()},
                {"max_model_len", cfg.max_position_embeddings},
                {"index_topk", cfg.index_topk},
                {"backend", model->backend()}};
  }
  void Accept();
  // Queues a task, or says why not (503).
  std::optional<Reply> Admit(std::shared_ptr<Task> task);
  void CountReply(int status) {
    if (status >= 400 && status < 500) ++n_client_errors;
  }
};

namespace serve_detail {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpServer::Impl* impl, tcp::socket socket)
      : impl_(impl), stream_(std::move(socket)), timer_(stream_.get_executor()) {
    beast::error_code ec;
    const tcp::endpoint peer = stream_.socket().remote_endpoint(ec);
    peer_ = ec ? "-" : peer.address().to_string();
  }

  void Start() { ReadHeader(); }

  // Waiting for a request (idle keep-alive, or a header/body still arriving) or draining after
  // the last answer: nothing of the engine's is at stake, so at the connection cap the one
  // waiting longest is closed to admit a new connection (slow or idle clients cannot hold every
  // slot, and /health stays answerable).
  bool Evictable() const { return !closed_ && waiting_; }
  std::chrono::steady_clock::time_point waiting_since() const { return waiting_since_; }
  bool closed() const { return closed_; }

  // Answers 503 and closes: the server has too many connections.
  void RejectBusy() {
    Send(Error(503, "overloaded_error", "too many connections; try again later"), true);
  }

  // Ends the connection now (I/O thread, or Stop after the I/O thread has ended).
  void Close() {
    closed_ = true;
    beast::error_code ignored;
    timer_.cancel();
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

 private:
  void ReadHeader() {
    waiting_ = true;
    waiting_since_ = std::chrono::steady_clock::now();
    parser_.emplace();
    parser_->header_limit(16 * 1024);
    parser_->body_limit(impl_->options.max_body_bytes);
    answered_ = false;
    streaming_ = false;
    method_ = path_ = "-";
    ++seq_;
    stream_.expires_after(std::chrono::milliseconds(impl_->options.read_timeout_ms));
    bhttp::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) return OnReadError(ec);
    const auto& h = parser_->get();
    version_ = h.version();
    keep_alive_ = h.keep_alive();
    if (auto length = parser_->content_length();
        length && *length > impl_->options.max_body_bytes) {
      return TooLarge();
    }
    if (beast::iequals(h[bhttp::field::expect], "100-continue")) {
      auto cont =
          std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_, version_);
      bhttp::async_write(stream_, *cont,
                         [self = shared_from_this(), cont](beast::error_code wec, size_t) {
                           if (wec) return self->Close();
                           self->ReadBody();
                         });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    bhttp::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
  }

  void OnBody(beast::error_code ec) {
    if (ec) return OnReadError(ec);
    req_ = parser_->release();
    parser_.reset();
    waiting_ = false;
    stream_.expires_never();
    ++impl_->n_requests;
    arrived_ = std::chrono::steady_clock::now();
    Handle();
  }

  void OnReadError(beast::error_code ec) {
    if (ec == bhttp::error::body_limit) return TooLarge();
    if (ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
        ec == beast::error::timeout || ec == asio::error::operation_aborted ||
        ec == asio::error::connection_reset || ec == bhttp::error::partial_message) {
      return Close();  // the client went away, or sent nothing in time
    }
    keep_alive_ = false;
    arrived_ = std::chrono::steady_clock::now();
    Send(Error(400, "invalid_request_error", "malformed HTTP request: " + ec.message()), true);
  }

  void TooLarge() {
    if (parser_) {
      const auto& h = parser_->get();
      method_ = std::string(h.method_string());
      path_ = std::string(h.target());
    }
    arrived_ = std::chrono::steady_clock::now();
    Send(Error(413, "invalid_request_error",
               "the request body is larger than " + std::to_string(impl_->options.max_body_bytes) +
                   " bytes"),
         true);
  }

  void Handle() {
    std::string path(req_.target());
    if (const size_t q = path.find('?'); q != std::string::npos) path.resize(q);
    const bhttp::verb method = req_.method();
    method_ = std::string(req_.method_string());
    path_ = path;
    auto only = [&](bhttp::verb allowed) {
      if (method == allowed) return true;
      Reply r = Error(405, "invalid_request_error",
                      std::string(bhttp::to_string(method)) + " is not allowed on " + path);
      r.headers.emplace_back("Allow", std::string(bhttp::to_string(allowed)));
      Send(std::move(r), false);
      return false;
    };
    if (path == "/health") {
      if (!only(bhttp::verb::get)) return;
      Reply r;
      r.body = json{{"status", "ok"}, {"model", impl_->model_name}};
      return Send(std::move(r), false);
    }
    if (!impl_->Authorized(req_[bhttp::field::authorization])) {
      ApiError e;
      e.status = 401;
      e.code = "invalid_api_key";
      e.message = req_[bhttp::field::authorization].empty()
                      ? "no API key given: send it as 'Authorization: Bearer KEY'"
                      : "incorrect API key provided";
      Reply r = ErrorReply(e);
      r.headers.emplace_back("WWW-Authenticate", "Bearer");
      return Send(std::move(r), false);
    }
    if (path == "/v1/models") {
      if (!only(bhttp::verb::get)) return;
      Reply r;
      r.body = json{{"object", "list"}, {"data", json::array({impl_->ModelObject()})}};
      return Send(std::move(r), false);
    }
    constexpr std::string_view kModelPrefix = "/v1/models/";
    if (path.starts_with(kModelPrefix)) {
      if (!only(bhttp::verb::get)) return;
      const std::optional<std::string> id = PercentDecode(path.substr(kModelPrefix.size()));
      if (id && *id == impl_->model_name) {
        Reply r;
        r.body = impl_->ModelObject();
        return Send(std::move(r), false);
      }
      ApiError e;
      e.status = 404;
      e.param = "model";
      e.code = "model_not_found";
      e.message = "the model '" + (id ? *id : path.substr(kModelPrefix.size())) +
                  "' does not exist; this server serves '" + impl_->model_name + "'";
      return Send(ErrorReply(e), false);
    }
    if (path == "/v1/completions") {
      if (!only(bhttp::verb::post)) return;
      return Complete(ApiKind::kCompletions);
    }
    if (path == "/v1/chat/completions") {
      if (!only(bhttp::verb::post)) return;
      return Complete(ApiKind::kChat);
    }
    Send(Error(404, "not_found_error", "no such endpoint: " + path), false);
  }

  // The body is parsed and validated on the parse pool, never on the I/O thread (a large body
  // takes a while); the connection is not read meanwhile.
  void Complete(ApiKind kind) {
    auto task = std::make_shared<Task>();
    task->impl = impl_;
    task->kind = kind;
    task->created_s = static_cast<int64_t>(std::time(nullptr));
    asio::post(impl_->parse_pool, [self = shared_from_this(), seq = seq_, task,
                                   body = std::move(req_.body())]() mutable {
      std::optional<Reply> refused;
      if (!JsonNestingWithin(body, kMaxJsonNesting)) {
        refused = Error(
            400, "invalid_request_error",
            "the request body nests deeper than " + std::to_string(kMaxJsonNesting) + " levels");
      } else {
        const json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
        if (parsed.is_discarded()) {
          refused = Error(400, "invalid_request_error", "the request body is not valid JSON");
        } else if (auto e = ParseCompletionRequest(parsed, task->kind, self->impl_->limits,
                                                   &task->request)) {
          refused = ErrorReply(*e);
        }
      }
      const bool large = body.size() >= kTrimAfterBytes;
      body.clear();
      body.shrink_to_fit();
      if (large) {
        // glibc keeps freed heap pages mapped (its mmap threshold rises after the first large
        // free), so a burst of large bodies would leave the server holding their peak: give
        // the free pages back (docs/http.md, "Memory after an attack").
        malloc_trim(0);
      }
      asio::post(self->stream_.get_executor(),
                 [self, seq, task = std::move(task), refused = std::move(refused)]() mutable {
                   if (seq != self->seq_ || self->closed_) return;
                   if (refused) return self->Send(std::move(*refused), false);
                   self->Run(std::move(task));
                 });
    });
  }

  void Run(std::shared_ptr<Task> task) {
    if (!task->request.model.empty() && task->request.model != impl_->model_name) {
      ApiError e;
      e.status = 404;
      e.type = "invalid_request_error";
      e.param = "model";
      e.code = "model_not_found";
      e.message = "the model '" + task->request.model + "' does not exist; this server serves '" +
                  impl_->model_name + "'";
      return Send(ErrorReply(e), false);
    }
    task->id = (task->kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-") + impl_->id_prefix +
               std::to_string(impl_->next_id.fetch_add(1));
    // The engine answers through the I/O thread; the task keeps this session alive until then.
    task->done = [self = shared_from_this(), seq = seq_](Reply reply) {
      asio::post(self->stream_.get_executor(), [self, seq, reply = std::move(reply)]() mutable {
        self->OnEngineDone(seq, std::move(reply));
      });
    };
    task->stream = [self = shared_from_this(), seq = seq_](StreamEvents events) {
      asio::post(self->stream_.get_executor(), [self, seq, events = std::move(events)]() mutable {
        self->OnStream(seq, std::move(events));
      });
    };
    task_ = task;
    if (auto refused = impl_->Admit(std::move(task))) return Send(std::move(*refused), false);
    timer_.expires_after(std::chrono::milliseconds(impl_->options.timeout_ms));
    timer_.async_wait([self = shared_from_this(), seq = seq_](beast::error_code ec) {
      if (!ec) self->OnDeadline(seq);
    });
    WatchDisconnect();
  }

  // While the request runs the connection is not read; a client that hangs up makes it readable
  // (end of stream), and the request is cancelled so that it leaves the batch at the next step.
  // Bytes of a pipelined next request also make it readable: those are left for the next read.
  void WatchDisconnect() {
    stream_.socket().async_wait(tcp::socket::wait_read,
                                [self = shared_from_this(), seq = seq_](beast::error_code ec) {
                                  if (ec || seq != self->seq_ || self->answered_) return;
                                  char c = 0;
                                  beast::error_code peek_ec;
                                  const size_t n = self->stream_.socket().receive(
                                      asio::buffer(&c, 1), tcp::socket::message_peek, peek_ec);
                                  if (n > 0 && !peek_ec)
                                    return;  // a pipelined request: not a hang-up
                                  if (auto t = self->task_.lock()) t->cancelled = true;
                                  ++self->impl_->n_disconnected;
                                  self->answered_ = true;
                                  self->AccessLog(499, -1, -1);
                                  self->Close();
                                });
  }

  void OnDeadline(uint64_t seq) {
    if (seq != seq_ || answered_) return;
    if (auto t = task_.lock()) t->cancelled = true;
    ++impl_->n_timed_out;
    Reply r = Error(
        504, "timeout_error",
        "the request did not finish within " + std::to_string(impl_->options.timeout_ms) + " ms");
    if (!streaming_) return Send(std::move(r), false);
    // The stream's status went out already: the error is its last event.
    StreamEvents events;
    events.data = SseEvent(r.body);
    events.last = true;
    OnStream(seq, std::move(events), 504);
  }

  void OnEngineDone(uint64_t seq, Reply reply) {
    if (seq != seq_ || answered_) return;  // answered 504 already
    timer_.cancel();
    Send(std::move(reply), false);
  }

  // Streamed events, in order; the first ones send the response header.
  void OnStream(uint64_t seq, StreamEvents events, int status = 200) {
    if (seq != seq_ || answered_ || closed_) return;
    if (!streaming_) {
      streaming_ = true;
      chunked_ = version_ >= 11;
      if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the body ends with the connection
      stream_res_ =
          std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::ok, version_);
      stream_res_->set(bhttp::field::server, std::string("nw-serve/") + kEngineVersion);
      stream_res_->set(bhttp::field::content_type, "text/event-stream; charset=utf-8");
      stream_res_->set(bhttp::field::cache_control, "no-cache");
      stream_res_->keep_alive(keep_alive_);
      if (chunked_) stream_res_->chunked(true);
      stream_sr_ = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*stream_res_);
      header_sent_ = false;
      stream_end_ = false;
      stream_ended_ = false;
      pending_.clear();
    }
    if (!events.data.empty()) pending_.push_back(std::move(events.data));
    if (events.last) {
      answered_ = true;
      stream_end_ = true;
      timer_.cancel();
      task_.reset();
      if (status == 200) ++impl_->n_completions;
      AccessLog(status, events.prompt_tokens, events.completion_tokens);
    }
    WriteNext();
  }

  void WriteNext() {
    if (writing_ || closed_ || !streaming_) return;
    auto after = [self = shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) {
        // The client is gone: its request leaves the batch.
        if (auto t = self->task_.lock()) t->cancelled = true;
        if (!self->answered_) {
          ++self->impl_->n_disconnected;
          self->answered_ = true;
          self->AccessLog(499, -1, -1);
        }
        return self->Close();
      }
      self->WriteNext();
    };
    stream_.expires_after(std::chrono::milliseconds(impl_->options.read_timeout_ms));
    if (!header_sent_) {
      header_sent_ = true;
      writing_ = true;
      bhttp::async_write_header(stream_, *stream_sr_, after);
      return;
    }
    if (!pending_.empty()) {
      auto data = std::make_shared<std::string>(std::move(pending_.front()));
      pending_.pop_front();
      writing_ = true;
      auto keep = [after, data](beast::error_code ec, size_t n) { after(ec, n); };
      if (chunked_) {
        asio::async_write(stream_, bhttp::make_chunk(asio::buffer(*data)), keep);
      } else {
        asio::async_write(stream_, asio::buffer(*data), keep);
      }
      return;
    }
    if (!stream_end_ || stream_ended_) return;
    stream_ended_ = true;
    auto finish = [self = shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      self->streaming_ = false;
      self->stream_sr_.reset();
      self->stream_res_.reset();
      if (ec) return self->Close();
      if (!self->keep_alive_) return self->DrainAndClose();
      self->ReadHeader();
    };
    if (chunked_) {
      writing_ = true;
      asio::async_write(stream_, bhttp::make_chunk_last(), finish);
    } else {
      finish({}, 0);
    }
  }

  void Send(Reply reply, bool close) {
    answered_ = true;
    task_.reset();
    impl_->CountReply(reply.status);
    AccessLog(reply.status, reply.prompt_tokens, reply.completion_tokens);
    auto res = std::make_shared<bhttp::response<bhttp::string_body>>(
        static_cast<bhttp::status>(reply.status), version_);
    res->set(bhttp::field::server, std::string("nw-serve/") + kEngineVersion);
    res->set(bhttp::field::content_type, "application/json");
    for (const auto& [name, value] : reply.headers) res->set(name, value);
    // Generated text may hold invalid UTF-8 (byte-level tokens): replaced, as the job protocol
    // does, so the client reads exactly what an in-process result carries.
    res->body() = reply.body.dump(-1, ' ', false, json::error_handler_t::replace);
    const bool keep = keep_alive_ && !close;
    res->keep_alive(keep);
    res->prepare_payload();
    stream_.expires_after(std::chrono::milliseconds(impl_->options.read_timeout_ms));
    bhttp::async_write(stream_, *res,
                       [self = shared_from_this(), res, keep](beast::error_code ec, size_t) {
                         if (ec) return self->Close();
                         if (!keep) return self->DrainAndClose();
                         self->ReadHeader();
                       });
  }

  // One line per request: time, peer, method and path, status, tokens, latency (from the
  // request's arrival to its answer: the last event of a stream). 499: the client hung up.
  void AccessLog(int status, int64_t prompt_tokens, int64_t completion_tokens) {
    if (!impl_->options.access_log) return;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - arrived_)
            .count();
    std::string line = UtcNow() + " " + peer_ + " \"" + ForLog(method_) + " " + ForLog(path_) +
                       "\" " + std::to_string(status);
    line += " prompt_tokens=" + (prompt_tokens < 0 ? "-" : std::to_string(prompt_tokens));
    line +=
        " completion_tokens=" + (completion_tokens < 0 ? "-" : std::to_string(completion_tokens));
    line += std::string(" stream=") + (streaming_ ? "1" : "0");
    line += " ms=" + Ms(ms);
    impl_->options.access_log(line);
  }

  // After a response with Connection: close: stop sending, read what the client still sends
  // (so the close does not reset the connection before it read the answer), then close.
  void DrainAndClose() {
    beast::error_code ignored;
    waiting_ = true;
    waiting_since_ = std::chrono::steady_clock::time_point::min();  // evicted first
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(std::chrono::seconds(2));
    Drain(std::make_shared<std::array<char, 4096>>());
  }

  void Drain(std::shared_ptr<std::array<char, 4096>> buf) {
    stream_.async_read_some(asio::buffer(*buf),
                            [self = shared_from_this(), buf](beast::error_code ec, size_t) {
                              if (ec) return self->Close();
                              self->Drain(buf);
                            });
  }

  HttpServer::Impl* impl_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bhttp::request<bhttp::string_body> req_;
  asio::steady_timer timer_;
  std::weak_ptr<Task> task_;  // the engine queue owns it
  uint64_t seq_ = 0;          // requests read on this connection
  bool answered_ = false;
  bool waiting_ = false;  // see Evictable()
  bool closed_ = false;
  std::chrono::steady_clock::time_point waiting_since_;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  // The access log's view of the request.
  std::string peer_, method_ = "-", path_ = "-";
  std::chrono::steady_clock::time_point arrived_ = std::chrono::steady_clock::now();
  // A streamed answer: the header, then each event as one chunk, then the last chunk.
  bool streaming_ = false, chunked_ = true, header_sent_ = false, writing_ = false;
  bool stream_end_ = false;    // the last events are queued
  bool stream_ended_ = false;  // the last chunk is being written
  std::deque<std::string> pending_;
  std::shared_ptr<bhttp::response<bhttp::empty_body>> stream_res_;
  std::shared_ptr<bhttp::response_serializer<bhttp::empty_body>> stream_sr_;
};

}  // namespace serve_detail

void HttpServer::Impl::Accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {
      Log("nw serve: accept failed: " + ec.message());
      Accept();
      return;
    }
    ++n_connections;
    std::erase_if(sessions, [](const std::weak_ptr<Session>& s) {
      auto p = s.lock();
      return p == nullptr || p->closed();
    });
    if (static_cast<int>(sessions.size()) >= options.max_connections) {
      // At the cap: the connection waiting longest for a request makes room.
      std::shared_ptr<Session> oldest;
      for (const auto& w : sessions) {
        auto p = w.lock();
        if (p && p->Evictable() && (!oldest || p->waiting_since() < oldest->waiting_since())) {
          oldest = p;
        }
      }
      if (oldest) {
        ++n_evicted;
        oldest->Close();
        std::erase_if(sessions,
                      [&](const std::weak_ptr<Session>& s) { return s.lock() == oldest; });
      }
    }
    auto session = std::make_shared<Session>(this, std::move(socket));
    sessions.push_back(session);
    if (static_cast<int>(sessions.size()) > options.max_connections) {
      session->RejectBusy();
    } else {
      session->Start();
    }
    Accept();
  });
}

std::optional<Reply> HttpServer::Impl::Admit(std::shared_ptr<Task> task) {
  switch (scheduler->Submit(std::move(task))) {
    case BatchScheduler::Admission::kQueued:
      return std::nullopt;
    case BatchScheduler::Admission::kStopping:
      return Error(503, "overloaded_error", "the server is shutting down");
    case BatchScheduler::Admission::kFull:
      break;
  }
  ++n_busy;
  Reply r = Error(503, "overloaded_error",
                  "the server is busy (" + std::to_string(scheduler->admitted()) +
                      " requests queued or running); try again later");
  r.headers.emplace_back("Retry-After", "1");
  return r;
}

namespace serve_detail {

Result<ServeRequest> Task::Prepare() {
  const CompletionRequest& q = request;
  const Tokenizer& tok = impl->model->tokenizer();
  ServeRequest sr;
  if (kind == ApiKind::kChat) {
    sr.prompt = tok.Encode(RenderChatPrompt(q.messages));
  } else if (q.prompt_text) {
    sr.prompt = tok.Encode(*q.prompt_text);
  } else {
    sr.prompt = q.prompt_ids;
  }
  if (sr.prompt.empty()) return Status::InvalidArgument("the prompt encodes to no tokens");
  if (q.max_tokens) {
    sr.max_tokens = *q.max_tokens;
  } else if (kind == ApiKind::kChat) {
    // The rest of the context, as OpenAI does (at least 1, so that a full prompt is refused).
    const int64_t mpe = impl->model->config().max_position_embeddings;
    const int64_t rest = mpe > 0 ? mpe - static_cast<int64_t>(sr.prompt.size()) : 16;
    sr.max_tokens = static_cast<int>(std::clamp<int64_t>(rest, 1, int64_t{1} << 30));
  } else {
    sr.max_tokens = 16;  // OpenAI's default for completions
  }
  sr.min_tokens = std::min(q.min_tokens, sr.max_tokens);
  sr.temperature = q.temperature;
  sr.top_p = q.top_p;
  sr.top_k = q.top_k;
  sr.logprobs = q.logprobs;
  sr.prompt_logprobs = q.echo && q.logprobs >= 0;
  sr.seed = q.seed ? *q.seed : impl->seeds();
  sr.stop = q.stop;
  sr.stop_token_ids = q.stop_token_ids;
  sr.ignore_eos = q.ignore_eos;
  sr.index_topk = q.index_topk.value_or(0);
  if (q.precision) sr.precision = *q.precision;
  if (q.fault && *q.fault != Fault::kNone) {
    if (!impl->options.allow_faults) {
      return Status::InvalidArgument(
          "fault: this server replays no faults (start nw serve with "
          "--allow-faults to admit them; docs/faults.md)");
    }
    sr.fault = *q.fault;
  }
  sr.return_indexer_topk = q.return_indexer_topk;
  return sr;
}

std::string Task::RoleChunk() {
  if (stream_started || kind != ApiKind::kChat) return "";
  return SseEvent(StreamChunk(kind, id, created_s, impl->model_name, "", /*first=*/true, nullptr,
                              request.include_usage));
}

std::string Task::TextChunk(const std::string& text) {
  if (text.size() <= streamed_bytes) return "";
  std::string events =
      SseEvent(StreamChunk(kind, id, created_s, impl->model_name, text.substr(streamed_bytes),
                           /*first=*/false, nullptr, request.include_usage));
  streamed_bytes = text.size();
  return events;
}

void Task::Progress(const ServeGeneration& generation) {
  if (!request.stream) return;
  StreamEvents events;
  events.data = RoleChunk() + TextChunk(generation.StreamableText());
  if (events.data.empty()) return;
  stream_started = true;
  stream(std::move(events));
}

namespace {

// OpenAI's legacy completions logprobs: tokens (their text), token_logprobs, top_logprobs ({text:
// logprob}) and text_offset, over the prompt's tokens (echo) and the generated ones.
json LogprobsObject(const Tokenizer& tok, const std::vector<TokenLogprob>& lps) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  int64_t offset = 0;
  for (const TokenLogprob& t : lps) {
    const std::string text = tok.Decode(std::span<const int32_t>(&t.token, 1));
    tokens.push_back(text);
    token_logprobs.push_back(t.logprob ? json(*t.logprob) : json(nullptr));
    if (!t.logprob) {
      top.push_back(nullptr);
    } else {
      json alternatives = json::object();
      for (const auto& [id, lp] : t.top) {
        const std::string alt = tok.Decode(std::span<const int32_t>(&id, 1));
        if (!alternatives.contains(alt)) alternatives[alt] = lp;
      }
      top.push_back(std::move(alternatives));
    }
    offsets.push_back(offset);
    offset += static_cast<int64_t>(text.size());
  }
  return json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top)},
              {"text_offset", std::move(offsets)}};
}

}  // namespace

void Task::Finish(const ServeRequest& sr, Result<ServeResult> r) {
  const CompletionRequest& q = request;
  if (!r.ok()) {
    const Status& s = r.status();
    Reply reply;
    switch (s.code()) {
      case StatusCode::kCancelled:
        return;  // answered 504 already, or the server is stopping
      case StatusCode::kOutOfRange:
        reply = Error(400, "invalid_request_error", s.message(), "context_length_exceeded");
        break;
      case StatusCode::kInvalidArgument:
      case StatusCode::kUnsupported:
        reply = Error(400, "invalid_request_error", s.message());
        break;
      default:
        impl->Log("nw serve: generation failed: " + s.ToString());
        reply = Error(500, "server_error", "generation failed: " + s.message());
    }
    if (!stream_started) return done(std::move(reply));
    StreamEvents events;  // the status went out already: the error is the stream's last event
    events.data = SseEvent(reply.body);
    events.last = true;
    return stream(std::move(events));
  }
  const int64_t prompt_tokens = static_cast<int64_t>(sr.prompt.size());
  const int64_t completion_tokens = static_cast<int64_t>(r->tokens.size());
  if (q.stream) {
    StreamEvents events;
    events.data = RoleChunk() + TextChunk(r->text);
    events.data += SseEvent(StreamChunk(kind, id, created_s, impl->model_name,
                                        kind == ApiKind::kChat ? json(nullptr) : json(""),
                                        /*first=*/false, r->finish_reason, q.include_usage));
    if (q.include_usage) {
      events.data += SseEvent(StreamUsageChunk(kind, id, created_s, impl->model_name, prompt_tokens,
                                               completion_tokens));
    }
    events.data += kSseDone;
    events.last = true;
    events.prompt_tokens = prompt_tokens;
    events.completion_tokens = completion_tokens;
    stream_started = true;
    return stream(std::move(events));
  }
  CompletionOutput out;
  out.text = r->text;
  if (q.echo) {
    out.text =
        (q.prompt_text ? *q.prompt_text : impl->model->tokenizer().Decode(sr.prompt)) + out.text;
  }
  if (q.logprobs >= 0) out.logprobs = LogprobsObject(impl->model->tokenizer(), r->logprobs);
  out.finish_reason = r->finish_reason;
  out.matched_stop = r->matched_stop;
  out.prompt_tokens = static_cast<int64_t>(sr.prompt.size());
  out.completion_tokens = static_cast<int64_t>(r->tokens.size());
  if (q.return_meta_info || q.return_indexer_topk) {
    json meta{{"id", id},
              {"prompt_tokens", out.prompt_tokens},
              {"completion_tokens", out.completion_tokens},
              {"finish_reason", json{{"type", out.finish_reason}, {"matched", out.matched_stop}}},
              {"prefill_ms", r->prefill_ms},
              {"decode_ms", r->decode_ms}};
    if (q.return_indexer_topk) {
      meta["indexer_topk"] = EncodeInt32Base64(r->indexer_topk);
      meta["indexer_topk_shape"] = json::array(
          {r->indexer_rows, static_cast<int64_t>(r->indexer_layers.size()), r->indexer_topk_width});
      meta["indexer_layers"] = r->indexer_layers;
    }
    out.meta_info = std::move(meta);
  }
  Reply reply;
  reply.body = CompletionResponse(kind, id, created_s, impl->model_name, out);
  reply.headers.emplace_back("nw-prefill-ms", Ms(r->prefill_ms));
  reply.headers.emplace_back("nw-decode-ms", Ms(r->decode_ms));
  reply.prompt_tokens = out.prompt_tokens;
  reply.completion_tokens = out.completion_tokens;
  ++impl->n_completions;
  done(std::move(reply));
}

}  // namespace serve_detail

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

Result<std::unique_ptr<HttpServer>> HttpServer::Start(std::unique_ptr<ServeModel> model,
                                                      HttpServerOptions options) {
  if (model == nullptr) return Status::InvalidArgument("nw serve: no model");
  if (options.max_body_bytes < 1) return Status::InvalidArgument("--max-body-bytes must be >= 1");
  if (options.timeout_ms < 1) return Status::InvalidArgument("--timeout-ms must be >= 1");
  if (options.read_timeout_ms < 1 || options.max_connections < 1) {
    return Status::InvalidArgument("read_timeout_ms and max_connections must be >= 1");
  }
  NW_ASSIGN_OR_RETURN(tcp::endpoint endpoint, ParseListenAddress(options.listen, "--listen"));
  auto impl = std::make_unique<Impl>();
  impl->model = std::move(model);
  BatchSchedulerOptions sched;
  sched.max_queued = options.max_batch;
  sched.max_running = options.max_running;
  sched.max_batched_tokens = options.max_batched_tokens;
  sched.before_generate = options.before_generate;
  sched.log = options.log;
  NW_ASSIGN_OR_RETURN(impl->scheduler, BatchScheduler::Start(impl->model.get(), std::move(sched)));
  impl->model_name = options.model_name.empty() ? "nw-model" : options.model_name;
  impl->options = std::move(options);
  impl->created_s = static_cast<int64_t>(std::time(nullptr));
  impl->id_prefix = RandomHex() + "-";
  if (sodium_init() < 0) return Status::Internal("libsodium failed to initialize");
  if (!impl->options.api_key.empty()) impl->api_key = DigestKey(impl->options.api_key);
  impl->host = endpoint.address().to_string();
  const int mpe = impl->model->config().max_position_embeddings;
  impl->limits.max_tokens = mpe > 0 ? mpe : 1 << 20;
  impl->limits.max_prompt_tokens = mpe > 0 ? mpe : 1 << 20;

  beast::error_code ec;
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::Unavailable("cannot listen on " + impl->options.listen + ": " + ec.message());
  }
  impl->port = impl->acceptor.local_endpoint().port();
  impl->work.emplace(impl->ioc.get_executor());
  impl->Accept();
  Impl* raw = impl.get();
  impl->io_thread = std::thread([raw] { raw->ioc.run(); });
  raw->Log("nw serve: listening on " + std::string("http://") +
           (raw->host.find(':') != std::string::npos ? "[" + raw->host + "]" : raw->host) + ":" +
           std::to_string(raw->port) + ", model '" + raw->model_name + "' on " +
           raw->model->backend());
  return std::make_unique<HttpServer>(std::move(impl));
}

void HttpServer::Stop() {
  Impl& m = *impl_;
  if (m.stopped.exchange(true)) return;
  // Cancels queued and running requests at once; the scheduler thread is joined after the
  // listener and the connections are closed (a step in progress may take a while).
  if (m.scheduler) m.scheduler->Cancel();
  asio::post(m.ioc, [&m] {
    beast::error_code ignored;
    m.acceptor.close(ignored);
    for (const auto& weak : m.sessions) {
      if (auto s = weak.lock()) s->Close();
    }
    m.work.reset();
    m.ioc.stop();
  });
  if (m.io_thread.joinable()) m.io_thread.join();
  m.parse_pool.join();
  if (m.scheduler) m.scheduler->Stop();
  m.Log("nw serve: stopped");
}

uint16_t HttpServer::port() const { return impl_->port; }

std::string HttpServer::url() const {
  const std::string& h = impl_->host;
  const std::string host = h == "0.0.0.0" ? "127.0.0.1" : h == "::" ? "::1" : h;
  return "http://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(impl_->port);
}

const std::string& HttpServer::model_name() const { return impl_->model_name; }

HttpServerStats HttpServer::stats() const {
  const Impl& m = *impl_;
  HttpServerStats s;
  s.connections = m.n_connections.load();
  s.requests = m.n_requests.load();
  s.completions = m.n_completions.load();
  s.rejected_busy = m.n_busy.load();
  s.timed_out = m.n_timed_out.load();
  s.client_errors = m.n_client_errors.load();
  s.disconnected = m.n_disconnected.load();
  if (m.scheduler) s.scheduler = m.scheduler->stats();
  return s;
}

}  // namespace nw
