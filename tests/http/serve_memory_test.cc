// `nw serve` under a body-and-connection attack, then idle again: its memory returns to the
// baseline. In-process server over a random tiny checkpoint; the figures (resident set before,
// at the peak and after) are printed, and the test fails when what stays after the attack exceeds
// a bound far below what the attack made the server hold. Under ThreadSanitizer or
// AddressSanitizer the figures are the sanitizer allocator's live heap bytes instead: there the
// resident set also holds the shadow of every page the attack touched and (ASan) the quarantine
// of freed blocks, which the runtime keeps after the server has freed them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "http/client.h"
#include "http/server.h"
#include "tests/http/http_test_util.h"

namespace nw {
namespace {

using json = nlohmann::json;
using tcp = boost::asio::ip::tcp;
using testing_http::TempDir;
using testing_http::WaitFor;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define NW_SANITIZER_HEAP 1
// The sanitizer runtimes' allocator statistics (sanitizer/allocator_interface.h, which GCC 12
// does not install; libtsan and libasan export the function).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif

// This process's memory in MiB: its resident set (/proc/self/statm), or under a sanitizer the
// bytes its heap has allocated and not freed.
double HeldMiB() {
#ifdef NW_SANITIZER_HEAP
  return static_cast<double>(__sanitizer_get_current_allocated_bytes()) / (1 << 20);
#else
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
#endif
}

// One POST with `body` on a fresh connection; reads the answer to its end (the server closes or
// answers 400/413).
void Post(uint16_t port, const std::string& body) {
  boost::asio::io_context ioc;
  tcp::socket sock(ioc);
  boost::system::error_code ec;
  sock.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port), ec);
  if (ec) return;
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n";
  boost::asio::write(sock, boost::asio::buffer(head), ec);
  if (!ec) boost::asio::write(sock, boost::asio::buffer(body), ec);
  std::string answer;
  boost::asio::read(sock, boost::asio::dynamic_buffer(answer), ec);
}

TEST(ServeMemoryTest, MemoryReturnsToBaselineAfterAnAttack) {
  TempDir dir;
  ASSERT_TRUE(testing_http::WriteTinyModel(dir.path() / "tiny").ok());
  auto model = ServeModel::Load(dir.path() / "tiny", "cpu");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  HttpServerOptions o;
  o.listen = "127.0.0.1:0";
  o.model_name = "tiny";
  o.max_connections = 64;
  auto server = HttpServer::Start(*std::move(model), o);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const uint16_t port = (*server)->port();
  auto url = HttpUrl::Parse((*server)->url());
  ASSERT_TRUE(url.ok());
  HttpClient client(*url, HttpClientOptions{});
  auto complete = [&] {
    auto r =
        client.Send("POST", "/v1/completions", json{{"prompt", "hello"}, {"max_tokens", 4}}.dump(),
                    std::chrono::seconds(60));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, 200) << r->body;
  };
  // The attack's bodies exist before the baseline is taken: only the server's memory is compared.
  const std::string big = "{\"prompt\": \"" + std::string(15 << 20, 'a') + "\", \"x\": [}";
  const std::string too_big(17 << 20, ' ');
  complete();  // warm: the engine's buffers and the first connection exist
  const double baseline = HeldMiB();

  // The attack, two rounds: 16 clients at once each send a 15 MiB body that is valid JSON
  // up to its last byte (parsed to the end, then refused), 16 send bodies over the limit (413),
  // and 48 connections open and trickle half a header, then go away.
  double peak = baseline;
  for (int round = 0; round < 2; ++round) {
    std::vector<std::thread> clients;
    std::vector<std::unique_ptr<tcp::socket>> slow;
    boost::asio::io_context ioc;
    for (int i = 0; i < 48; ++i) {
      auto s = std::make_unique<tcp::socket>(ioc);
      boost::system::error_code ec;
      s->connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port), ec);
      if (!ec) boost::asio::write(*s, boost::asio::buffer(std::string("POST /v1/compl")), ec);
      slow.push_back(std::move(s));
    }
    for (int i = 0; i < 16; ++i) clients.emplace_back([&] { Post(port, big); });
    for (int i = 0; i < 16; ++i) clients.emplace_back([&] { Post(port, too_big); });
    std::thread sampler([&] {
      for (int i = 0; i < 200; ++i) {
        peak = std::max(peak, HeldMiB());
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
    for (auto& t : clients) t.join();
    sampler.join();
    slow.clear();
  }
  // Idle again: every connection closed, one more ordinary request.
  complete();
  const double after = HeldMiB();
  std::printf(
      "nw serve memory (%s): baseline %.1f MiB, peak %.1f MiB during the attack, %.1f MiB after "
      "(+%.1f MiB)\n",
#ifdef NW_SANITIZER_HEAP
      "sanitizer heap, live bytes",
#else
      "resident set",
#endif
      baseline, peak, after, after - baseline);
  EXPECT_LT(after - baseline, 32.0) << "memory held after the attack";
  (*server)->Stop();
}

}  // namespace
}  // namespace nw
