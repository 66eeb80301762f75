// Helpers for the dashboard tests: a small synchronous HTTP client (Boost.Beast) and raw-socket
// requests for the malformed or oversized inputs no well-behaved client sends; promtool.
#pragma once

#include <sys/wait.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

namespace nw::dashboard_test {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

struct Response {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;
  std::string error;  // set when no response came back
};

/// One request on a fresh connection to 127.0.0.1:port.
inline Response Request(uint16_t port, bhttp::verb method, const std::string& target,
                        const std::map<std::string, std::string>& headers = {},
                        const std::string& body = "") {
  Response out;
  try {
    asio::io_context ioc;
    beast::tcp_stream stream(ioc);
    stream.expires_after(std::chrono::seconds(60));
    stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    bhttp::request<bhttp::string_body> req(method, target, 11);
    req.set(bhttp::field::host, "127.0.0.1");
    for (const auto& [k, v] : headers) req.set(k, v);
    if (!body.empty()) {
      req.body() = body;
      req.prepare_payload();
    }
    bhttp::write(stream, req);
    beast::flat_buffer buffer;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(256 << 20);
    bhttp::read(stream, buffer, parser);
    const auto& res = parser.get();
    out.status = static_cast<int>(res.result_int());
    out.body = res.body();
    for (const auto& f : res) out.headers[std::string(f.name_string())] = std::string(f.value());
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

inline Response Get(uint16_t port, const std::string& target,
                    const std::map<std::string, std::string>& headers = {}) {
  return Request(port, bhttp::verb::get, target, headers);
}

/// Sends `bytes` as they are and returns everything the server sends back until it closes (or
/// 30 s pass).
inline std::string Raw(uint16_t port, const std::string& bytes) {
  std::string out;
  try {
    asio::io_context ioc;
    beast::tcp_stream stream(ioc);
    stream.expires_after(std::chrono::seconds(30));
    stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    asio::write(stream, asio::buffer(bytes));
    beast::error_code ec;
    char buf[4096];
    while (true) {
      const size_t n = stream.read_some(asio::buffer(buf), ec);
      out.append(buf, n);
      if (ec) break;
    }
  } catch (const std::exception& e) {
    out += std::string("[error: ") + e.what() + "]";
  }
  return out;
}

/// The status code of the first response line in `raw` ("HTTP/1.1 413 ..."), or 0.
inline int StatusOf(const std::string& raw) {
  if (raw.rfind("HTTP/1.", 0) != 0 || raw.size() < 12) return 0;
  return std::atoi(raw.substr(9, 3).c_str());
}

constexpr const char* kPromtool = "/usr/bin/promtool";

/// `promtool check metrics` on `text`: its exit code and output (-1 when promtool is missing).
inline std::pair<int, std::string> Promtool(const std::string& text,
                                            const std::filesystem::path& dir) {
  if (!std::filesystem::exists(kPromtool)) return {-1, "promtool is not installed"};
  const auto in = dir / "metrics.txt";
  const auto log = dir / "promtool.log";
  std::ofstream(in) << text;
  const std::string cmd =
      std::string(kPromtool) + " check metrics < " + in.string() + " > " + log.string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream l(log);
  std::string out((std::istreambuf_iterator<char>(l)), std::istreambuf_iterator<char>());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

}  // namespace nw::dashboard_test
