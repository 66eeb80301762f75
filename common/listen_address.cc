#include "common/listen_address.h"

#include <boost/asio/ip/address.hpp>
#include <charconv>
#include <cstdint>

namespace nw {

Result<boost::asio::ip::tcp::endpoint> ParseListenAddress(const std::string& listen,
                                                          std::string_view flag) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(std::string(flag) + " '" + listen + "': " + why);
  };
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return bad("expected host:port, e.g. 127.0.0.1:8080");
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
  boost::system::error_code ec;
  const boost::asio::ip::address address = boost::asio::ip::make_address(host, ec);
  if (ec) return bad("'" + host + "' is not an IP address");
  return boost::asio::ip::tcp::endpoint(address, static_cast<uint16_t>(port));
}

}  // namespace nw
