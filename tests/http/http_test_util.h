// Shared by the tests/http tests: temp folders, a random tiny checkpoint with a trained
// tokenizer (what `nw model init` writes), polling with a deadline, and RawServer, a scripted
// HTTP/1.1 server on raw Asio sockets for the answers a real server would not give (malformed
// JSON, responses cut short, hung requests).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <boost/asio/buffers_iterator.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <istream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/random_checkpoint.h"
#include "engine/engine.h"
#include "engine/text/tokenizer.h"
#include "task/niah.h"
#include "tests/support/temp_dir.h"

namespace nw::testing_http {

// Blocks the server's generation hook (before_generate) until opened; counts the generations
// that entered it.
class Gate {
 public:
  void Enter() {
    std::unique_lock<std::mutex> lock(mu_);
    ++entered_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  int entered() {
    std::lock_guard<std::mutex> lock(mu_);
    return entered_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  int entered_ = 0;
};

/// A fresh folder under the temp dir, removed on destruction.
using TempDir = test_support::TempDir;

/// The tiny-a config with random weights and a tokenizer trained on NIAH text, as
/// `nw model init --config models/configs/tiny-a.json` writes it.
inline Status WriteTinyModel(const std::filesystem::path& dir, uint64_t seed = 7) {
  NW_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(std::filesystem::path(NW_SOURCE_DIR) /
                                                       "models" / "configs" / "tiny-a.json"));
  const std::vector<std::string> specials = {"<|begin_of_text|>", "<|end_of_text|>"};
  NW_ASSIGN_OR_RETURN(
      nlohmann::json tok_json,
      TrainByteLevelBpe(NiahTokenizerCorpus(seed, 256 * 1024), cfg.vocab_size, specials));
  NW_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::FromJson(tok_json, "trained tokenizer"));
  cfg.bos_token_id = *tok.TokenId(specials[0]);
  cfg.eos_token_id = *tok.TokenId(specials[1]);
  std::filesystem::create_directories(dir);
  NW_RETURN_IF_ERROR(WriteRandomCheckpoint(cfg, seed, CheckpointLayout::kBf16, dir));
  std::ofstream f(dir / "tokenizer.json");
  f << tok_json.dump(1) << "\n";
  if (!f) return Status::IoError("cannot write tokenizer.json");
  return Status::Ok();
}

/// Polls `done` until it holds or `timeout` passes; returns its last value.
inline bool WaitFor(const std::function<bool()>& done,
                    std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

/// A port nothing listens on right now (bound, then released).
inline uint16_t FreePort() {
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::acceptor a(
      ioc, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  return a.local_endpoint().port();
}

struct RawRequest {
  std::string method;
  std::string target;
  std::map<std::string, std::string> headers;  // lowercase names
  std::string body;
};

struct RawReply {
  std::string bytes;   // written as is
  bool close = false;  // close the connection after writing (else keep reading requests)
  bool hang = false;   // hold the answer until Release() (then write `bytes`)
};

/// "HTTP/1.1 <status>" with a JSON body and a correct Content-Length.
inline RawReply JsonReply(int status, const std::string& body, bool close = false) {
  RawReply r;
  r.bytes = "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\n" +
            "Content-Length: " + std::to_string(body.size()) + "\r\n" +
            (close ? "Connection: close\r\n" : "") + "\r\n" + body;
  r.close = close;
  return r;
}

/// A scripted HTTP/1.1 server on 127.0.0.1: every request goes to `handler` (called on the
/// server's own I/O thread with the request and its 0-based index), whose reply bytes are
/// written verbatim. Connections are served concurrently.
class RawServer {
 public:
  using Handler = std::function<RawReply(const RawRequest&, int index)>;

  explicit RawServer(Handler handler, uint16_t port = 0)
      : handler_(std::move(handler)),
        acceptor_(ioc_, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"),
                                                       port)) {
    Accept();
    thread_ = std::thread([this] { ioc_.run(); });
  }
  ~RawServer() {
    boost::asio::post(ioc_, [this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
      for (auto& c : conns_) c->socket.close(ec);
      ioc_.stop();
    });
    thread_.join();
  }
  RawServer(const RawServer&) = delete;
  RawServer& operator=(const RawServer&) = delete;

  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }
  int requests() const { return requests_.load(); }
  int hung() const { return hung_.load(); }
  int max_concurrent() const { return max_concurrent_.load(); }
  std::vector<RawRequest> seen() const {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  /// Writes the answers of every hung request.
  void Release() {
    boost::asio::post(ioc_, [this] {
      auto held = std::move(held_);
      held_.clear();
      for (auto& [conn, reply] : held) {
        --hung_;
        Write(conn, reply);
      }
    });
  }

 private:
  struct Conn {
    explicit Conn(boost::asio::io_context& ioc) : socket(ioc) {}
    boost::asio::ip::tcp::socket socket;
    boost::asio::streambuf buf;
  };

  void Accept() {
    auto conn = std::make_shared<Conn>(ioc_);
    acceptor_.async_accept(conn->socket, [this, conn](boost::system::error_code ec) {
      if (ec) return;
      conns_.push_back(conn);
      ReadRequest(conn);
      Accept();
    });
  }

  void ReadRequest(std::shared_ptr<Conn> conn) {
    boost::asio::async_read_until(
        conn->socket, conn->buf, "\r\n\r\n",
        [this, conn](boost::system::error_code ec, size_t header_bytes) {
          if (ec) return;
          RawRequest req;
          std::string head(boost::asio::buffers_begin(conn->buf.data()),
                           boost::asio::buffers_begin(conn->buf.data()) +
                               static_cast<std::ptrdiff_t>(header_bytes));
          conn->buf.consume(header_bytes);
          std::istringstream in(head);
          std::string line;
          std::getline(in, line);
          std::istringstream first(line);
          first >> req.method >> req.target;
          while (std::getline(in, line) && line != "\r" && !line.empty()) {
            const size_t colon = line.find(':');
            if (colon == std::string::npos) continue;
            std::string name = line.substr(0, colon);
            for (char& ch : name) ch = static_cast<char>(std::tolower(ch));
            std::string value = line.substr(colon + 1);
            while (!value.empty() && (value.front() == ' ')) value.erase(0, 1);
            while (!value.empty() && (value.back() == '\r' || value.back() == ' '))
              value.pop_back();
            req.headers[name] = value;
          }
          size_t length = 0;
          if (auto it = req.headers.find("content-length"); it != req.headers.end()) {
            length = std::stoul(it->second);
          }
          auto have = conn->buf.size();
          auto finish = [this, conn, req, length]() mutable {
            req.body.assign(
                boost::asio::buffers_begin(conn->buf.data()),
                boost::asio::buffers_begin(conn->buf.data()) + static_cast<std::ptrdiff_t>(length));
            conn->buf.consume(length);
            Dispatch(conn, std::move(req));
          };
          if (have >= length) return finish();
          boost::asio::async_read(conn->socket, conn->buf,
                                  boost::asio::transfer_exactly(length - have),
                                  [finish](boost::system::error_code rec, size_t) mutable {
                                    if (!rec) finish();
                                  });
        });
  }

  void Dispatch(std::shared_ptr<Conn> conn, RawRequest req) {
    const int index = requests_.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen_.push_back(req);
    }
    const int now = ++in_flight_;
    int prev = max_concurrent_.load();
    while (now > prev && !max_concurrent_.compare_exchange_weak(prev, now)) {
    }
    RawReply reply = handler_(req, index);
    if (reply.hang) {
      ++hung_;
      held_.emplace_back(conn, std::move(reply));
      return;
    }
    Write(conn, std::move(reply));
  }

  void Write(std::shared_ptr<Conn> conn, RawReply reply) {
    auto bytes = std::make_shared<std::string>(std::move(reply.bytes));
    const bool close = reply.close;
    boost::asio::async_write(conn->socket, boost::asio::buffer(*bytes),
                             [this, conn, bytes, close](boost::system::error_code ec, size_t) {
                               --in_flight_;
                               if (ec || close) {
                                 boost::system::error_code ignored;
                                 conn->socket.shutdown(boost::asio::ip::tcp::socket::shutdown_both,
                                                       ignored);
                                 conn->socket.close(ignored);
                                 return;
                               }
                               ReadRequest(conn);
                             });
  }

  Handler handler_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::vector<std::shared_ptr<Conn>> conns_;                      // I/O thread
  std::vector<std::pair<std::shared_ptr<Conn>, RawReply>> held_;  // I/O thread
  mutable std::mutex mu_;
  std::vector<RawRequest> seen_;
  std::atomic<int> requests_{0}, hung_{0}, in_flight_{0}, max_concurrent_{0};
  std::thread thread_;
};

// A test suite over one random tiny model (WriteTinyModel) and its CPU engine, made once per
// suite: model_dir() and engine_ for the tests.
class TinyEngineSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    Status s = WriteTinyModel(model_dir());
    ASSERT_TRUE(s.ok()) << s.ToString();
    auto engine = LoadEngine(model_dir(), EngineOptions{});
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = *std::move(engine);
  }
  static void TearDownTestSuite() {
    engine_.reset();
    dir_.reset();
  }
  static std::filesystem::path model_dir() { return dir_->path() / "tiny"; }

  static inline std::unique_ptr<TempDir> dir_;
  static inline std::unique_ptr<Engine> engine_;
};

}  // namespace nw::testing_http
