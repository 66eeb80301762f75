#include "http/server.h"

#include <array>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

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
struct Task final : BatchJob {
  HttpServer::Impl* impl = nullptr;
  ApiKind kind = ApiKind::kCompletions;
  CompletionRequest request;
  std::string id;
  std::function<void(Reply)> done;

  Result<ServeRequest> Prepare() override;
  void Finish(const ServeRequest& sr, Result<ServeResult> result) override;
};

class Session;

}  // namespace serve_detail

using serve_detail::Error;
using serve_detail::ErrorReply;
using serve_detail::Reply;
using serve_detail::Session;
using serve_detail::Task;

namespace {

// "host:port" -> endpoint; IPv6 as "[::1]:8000".
Result<tcp::endpoint> ParseListen(const std::string& listen) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("--listen '" + listen + "': " + why);
  };
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return bad("expected host:port");
  std::string host = listen.substr(0, colon);
  const std::string port_text = listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = -1;
  auto r = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (r.ec != std::errc() || r.ptr != port_text.data() + port_text.size() || port < 0 ||
      port > 65535) {
    return bad("bad port '" + port_text + "'");
  }
  if (host == "localhost") host = "127.0.0.1";
  beast::error_code ec;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (ec) return bad("'" + host + "' is not an IP address");
  return tcp::endpoint(address, static_cast<uint16_t>(port));
}

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

}  // namespace

struct HttpServer::Impl {
  // The io_context is declared first so that it is destroyed last: handlers it still holds own
  // sessions, whose sockets belong to it.
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  tcp::acceptor acceptor{ioc};
  HttpServerOptions options;
  std::unique_ptr<ServeModel> model;
  std::string model_name;
  int64_t created_s = 0;
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
      : impl_(impl), stream_(std::move(socket)), timer_(stream_.get_executor()) {}

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
    waiting_ = false;
    stream_.expires_never();
    ++impl_->n_requests;
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
    Send(Error(400, "invalid_request_error", "malformed HTTP request: " + ec.message()), true);
  }

  void TooLarge() {
    Send(Error(413, "invalid_request_error",
               "the request body is larger than " + std::to_string(impl_->options.max_body_bytes) +
                   " bytes"),
         true);
  }

  void Handle() {
    std::string path(req_.target());
    if (const size_t q = path.find('?'); q != std::string::npos) path.resize(q);
    const bhttp::verb method = req_.method();
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
    if (path == "/v1/models") {
      if (!only(bhttp::verb::get)) return;
      const ModelConfig& cfg = impl_->model->config();
      Reply r;
      r.body = json{{"object", "list"},
                    {"data", json::array({json{{"id", impl_->model_name},
                                               {"object", "model"},
                                               {"created", impl_->created_s},
                                               {"owned_by", "needlework"},
                                               {"root", impl_->model->model_digest()},
                                               {"max_model_len", cfg.max_position_embeddings},
                                               {"index_topk", cfg.index_topk},
                                               {"backend", impl_->model->backend()}}})}};
      return Send(std::move(r), false);
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

  void Complete(ApiKind kind) {
    if (!JsonNestingWithin(req_.body(), kMaxJsonNesting)) {
      return Send(Error(400, "invalid_request_error",
                        "the request body nests deeper than " + std::to_string(kMaxJsonNesting) +
                            " levels"),
                  false);
    }
    const json body = json::parse(req_.body(), nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded()) {
      return Send(Error(400, "invalid_request_error", "the request body is not valid JSON"), false);
    }
    auto task = std::make_shared<Task>();
    task->impl = impl_;
    task->kind = kind;
    if (auto e = ParseCompletionRequest(body, kind, impl_->limits, &task->request)) {
      return Send(ErrorReply(*e), false);
    }
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
    task->id = (kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-") +
               std::to_string(impl_->next_id.fetch_add(1));
    // The engine answers through the I/O thread; the task keeps this session alive until then.
    task->done = [self = shared_from_this(), seq = seq_](Reply reply) {
      asio::post(self->stream_.get_executor(), [self, seq, reply = std::move(reply)]() mutable {
        self->OnEngineDone(seq, std::move(reply));
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
                                  self->Close();
                                });
  }

  void OnDeadline(uint64_t seq) {
    if (seq != seq_ || answered_) return;
    if (auto t = task_.lock()) t->cancelled = true;
    ++impl_->n_timed_out;
    Send(Error(504, "timeout_error",
               "the request did not finish within " + std::to_string(impl_->options.timeout_ms) +
                   " ms"),
         false);
  }

  void OnEngineDone(uint64_t seq, Reply reply) {
    if (seq != seq_ || answered_) return;  // answered 504 already
    timer_.cancel();
    Send(std::move(reply), false);
  }

  void Send(Reply reply, bool close) {
    answered_ = true;
    task_.reset();
    impl_->CountReply(reply.status);
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
  sr.max_tokens = q.max_tokens;
  sr.temperature = q.temperature;
  sr.top_p = q.top_p;
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

void Task::Finish(const ServeRequest& sr, Result<ServeResult> r) {
  const CompletionRequest& q = request;
  if (!r.ok()) {
    const Status& s = r.status();
    switch (s.code()) {
      case StatusCode::kCancelled:
        return;  // answered 504 already, or the server is stopping
      case StatusCode::kOutOfRange:
        return done(Error(400, "invalid_request_error", s.message(), "context_length_exceeded"));
      case StatusCode::kInvalidArgument:
      case StatusCode::kUnsupported:
        return done(Error(400, "invalid_request_error", s.message()));
      default:
        impl->Log("nw serve: generation failed: " + s.ToString());
        return done(Error(500, "server_error", "generation failed: " + s.message()));
    }
  }
  CompletionOutput out;
  out.text = r->text;
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
  reply.body = CompletionResponse(kind, id, impl->created_s, impl->model_name, out);
  reply.headers.emplace_back("nw-prefill-ms", Ms(r->prefill_ms));
  reply.headers.emplace_back("nw-decode-ms", Ms(r->decode_ms));
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
  NW_ASSIGN_OR_RETURN(tcp::endpoint endpoint, ParseListen(options.listen));
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
