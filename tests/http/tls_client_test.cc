// https for the http backend: HttpClient and HttpExecutor against an in-process Beast TLS server
// whose self-signed certificate (for "localhost") is made in the test with the OpenSSL API. An
// untrusted certificate is refused with a message naming the URL, trusting it through ca_file
// makes it work (keep-alive included), a certificate for another name is refused, an unreadable
// ca_file is reported, and a streamed http campaign job runs over TLS end to end.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "coordinator/campaign/campaign.h"
#include "http/client.h"
#include "http/http_executor.h"
#include "tests/http/http_test_util.h"

namespace nw {
namespace {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;
using ::testing::HasSubstr;
using testing_http::TempDir;

struct FreeKey {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct FreeCert {
  void operator()(X509* p) const { X509_free(p); }
};
struct CloseFile {
  void operator()(FILE* f) const { std::fclose(f); }
};

// A self-signed certificate for DNS name `host` (P-256, SHA-256, valid from an hour ago for a
// day), which is also its own CA.
struct SelfSigned {
  std::unique_ptr<EVP_PKEY, FreeKey> key;
  std::unique_ptr<X509, FreeCert> cert;
};

SelfSigned MakeCertificate(const std::string& host) {
  SelfSigned out;
  out.key.reset(EVP_EC_gen("P-256"));
  EXPECT_NE(out.key, nullptr);
  out.cert.reset(X509_new());
  X509* x = out.cert.get();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 24 * 3600);
  X509_set_pubkey(x, out.key.get());
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(host.c_str()), -1, -1, 0);
  X509_set_issuer_name(x, name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, x, x, nullptr, nullptr, 0);
  for (const auto& [nid, value] : {std::pair<int, std::string>{NID_subject_alt_name, "DNS:" + host},
                                   {NID_basic_constraints, "critical,CA:TRUE"},
                                   {NID_key_usage, "critical,digitalSignature,keyCertSign"}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
    EXPECT_NE(ext, nullptr);
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  }
  EXPECT_GT(X509_sign(x, out.key.get(), EVP_sha256()), 0);
  return out;
}

void WritePem(const std::filesystem::path& file, X509* cert) {
  std::unique_ptr<FILE, CloseFile> f(std::fopen(file.c_str(), "w"));
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(PEM_write_X509(f.get(), cert), 1);
}

// An HTTPS server on 127.0.0.1 (one I/O thread, keep-alive): every request goes to `handler`.
class TlsServer {
 public:
  using Handler =
      std::function<bhttp::response<bhttp::string_body>(const bhttp::request<bhttp::string_body>&)>;

  TlsServer(const SelfSigned& identity, Handler handler)
      : handler_(std::move(handler)),
        ctx_(ssl::context::tls_server),
        acceptor_(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    EXPECT_EQ(SSL_CTX_use_certificate(ctx_.native_handle(), identity.cert.get()), 1);
    EXPECT_EQ(SSL_CTX_use_PrivateKey(ctx_.native_handle(), identity.key.get()), 1);
    Accept();
    thread_ = std::thread([this] { ioc_.run(); });
  }
  ~TlsServer() {
    asio::post(ioc_, [this] {
      beast::error_code ec;
      acceptor_.close(ec);
      ioc_.stop();
    });
    thread_.join();
  }
  TlsServer(const TlsServer&) = delete;
  TlsServer& operator=(const TlsServer&) = delete;

  uint16_t port() const { return port_; }
  int handshakes() const { return handshakes_.load(); }
  int requests() const { return requests_.load(); }

 private:
  struct Session : std::enable_shared_from_this<Session> {
    Session(tcp::socket socket, ssl::context& ctx, TlsServer& server)
        : stream(std::move(socket), ctx), owner(server) {}
    void Start() {
      stream.async_handshake(ssl::stream_base::server,
                             [self = shared_from_this()](beast::error_code ec) {
                               if (ec) return;
                               ++self->owner.handshakes_;
                               self->Read();
                             });
    }
    void Read() {
      request = {};
      bhttp::async_read(
          stream, buffer, request, [self = shared_from_this()](beast::error_code ec, size_t) {
            if (ec) return;
            ++self->owner.requests_;
            self->response = self->owner.handler_(self->request);
            self->response.keep_alive(self->request.keep_alive());
            self->response.prepare_payload();
            bhttp::async_write(self->stream, self->response, [self](beast::error_code wec, size_t) {
              if (!wec) self->Read();
            });
          });
    }
    ssl::stream<tcp::socket> stream;
    TlsServer& owner;
    beast::flat_buffer buffer;
    bhttp::request<bhttp::string_body> request;
    bhttp::response<bhttp::string_body> response;
  };

  void Accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec) return;
      std::make_shared<Session>(std::move(socket), ctx_, *this)->Start();
      Accept();
    });
  }

  Handler handler_;
  asio::io_context ioc_;
  ssl::context ctx_;
  tcp::acceptor acceptor_;
  uint16_t port_ = acceptor_.local_endpoint().port();
  std::atomic<int> handshakes_{0}, requests_{0};
  std::thread thread_;
};

bhttp::response<bhttp::string_body> Reply(int status, const std::string& content_type,
                                          const std::string& body) {
  bhttp::response<bhttp::string_body> r{static_cast<bhttp::status>(status), 11};
  r.set(bhttp::field::content_type, content_type);
  r.body() = body;
  return r;
}

class TlsClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    identity_ = MakeCertificate("localhost");
    ca_file_ = dir_.path() / "ca.pem";
    WritePem(ca_file_, identity_.cert.get());
    server_ = std::make_unique<TlsServer>(identity_, [](const auto& req) {
      return Reply(200, "application/json", json{{"target", req.target()}}.dump());
    });
  }
  std::string Url(const std::string& host = "localhost") const {
    return "https://" + host + ":" + std::to_string(server_->port());
  }
  std::unique_ptr<HttpClient> Client(const std::string& url, const std::string& ca_file = "") {
    auto u = HttpUrl::Parse(url);
    EXPECT_TRUE(u.ok()) << u.status().ToString();
    HttpClientOptions o;
    o.ca_file = ca_file;
    return std::make_unique<HttpClient>(*u, o);
  }

  TempDir dir_;
  SelfSigned identity_;
  std::filesystem::path ca_file_;
  std::unique_ptr<TlsServer> server_;
};

TEST(HttpUrlTest, HttpsUrlsParse) {
  auto u = HttpUrl::Parse("https://api.example.com/v1");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->port, 443);
  EXPECT_EQ(u->Origin(), "https://api.example.com:443");
  auto v = HttpUrl::Parse("https://[::1]:8443");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->Origin(), "https://[::1]:8443");
  auto plain = HttpUrl::Parse("http://h");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->tls);
  EXPECT_EQ(plain->port, 80);
  EXPECT_THAT(HttpUrl::Parse("ftp://h").status().message(),
              HasSubstr("must start with http:// or https://"));
}

TEST_F(TlsClientTest, AnUntrustedCertificateIsRefusedNamingTheUrl) {
  auto client = Client(Url());
  auto r = client->Send("GET", "/health", "", std::chrono::seconds(20));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("the TLS certificate of " + Url() + " was refused"));
  EXPECT_THAT(r.status().message(), HasSubstr("self-signed certificate"));
  EXPECT_THAT(r.status().message(), HasSubstr("ca_file"));
  EXPECT_EQ(server_->requests(), 0);
}

TEST_F(TlsClientTest, TrustingItsCertificateWithCaFileWorks) {
  auto client = Client(Url(), ca_file_.string());
  for (int i = 0; i < 3; ++i) {
    auto r = client->Send("GET", "/health?i=" + std::to_string(i), "", std::chrono::seconds(20));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(json::parse(r->body)["target"], "/health?i=" + std::to_string(i));
  }
  EXPECT_EQ(client->stats().connections_opened, 1);  // keep-alive over TLS
  EXPECT_EQ(server_->handshakes(), 1);
  // A body that goes to a sink arrives whole, in pieces.
  std::string got;
  auto r = client->Send("POST", "/v1/x", "{}", std::chrono::seconds(20), {},
                        [&](std::string_view bytes) {
                          got.append(bytes);
                          return Status::Ok();
                        });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->body.empty());
  EXPECT_EQ(json::parse(got)["target"], "/v1/x");
}

TEST_F(TlsClientTest, ACertificateForAnotherNameIsRefused) {
  // Trusted, but it names localhost, not 127.0.0.1.
  auto client = Client(Url("127.0.0.1"), ca_file_.string());
  auto r = client->Send("GET", "/health", "", std::chrono::seconds(20));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr(Url("127.0.0.1")));
  EXPECT_THAT(r.status().message(), HasSubstr("does not name 127.0.0.1"));
}

TEST_F(TlsClientTest, AnUnreadableCaFileIsReported) {
  const std::string missing = (dir_.path() / "nope.pem").string();
  auto client = Client(Url(), missing);
  auto r = client->Send("GET", "/health", "", std::chrono::seconds(20));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(),
              HasSubstr("ca_file " + missing + ": cannot load certificates (cannot read"));
  // A file without a certificate in it.
  const std::string junk = (dir_.path() / "junk.pem").string();
  std::ofstream(junk) << "not a certificate\n";
  auto r2 = Client(Url(), junk)->Send("GET", "/health", "", std::chrono::seconds(20));
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(r2.status().message(), HasSubstr("ca_file " + junk + ": cannot load certificates"));
  EXPECT_EQ(server_->handshakes(), 0);
}

// A campaign job over https, streamed: refused at once (no readiness wait, no retries) without
// the certificate, answered with it.
TEST_F(TlsClientTest, AStreamedCampaignJobRunsOverHttps) {
  const std::filesystem::path model = dir_.path() / "tiny";
  ASSERT_TRUE(testing_http::WriteTinyModel(model).ok());
  server_ = std::make_unique<TlsServer>(identity_, [](const auto& req) {
    if (req.target() == "/health") return Reply(200, "application/json", "{}");
    const json in = json::parse(req.body());
    const auto event = [](const json& j) { return "data: " + j.dump() + "\n\n"; };
    return Reply(
        200, "text/event-stream",
        event({{"choices", {{{"text", " 1234"}, {"finish_reason", nullptr}}}}}) +
            event({{"choices", {{{"text", ""}, {"finish_reason", "length"}}}}}) +
            event({{"choices", json::array()},
                   {"usage", {{"prompt_tokens", in["prompt"].size()}, {"completion_tokens", 2}}}}) +
            "data: [DONE]\n\n");
  });
  auto job_for = [&](const std::string& more) {
    const std::string text = "name: tls\nmodel: " + model.string() +
                             "\nmatrix:\n  context_length: 200\n  needle_position: 0.5\n"
                             "  topk: 16\n  backend: {http: {url: '" +
                             Url() + "', model: tiny, stream: true, retries: 3" + more +
                             "}}\ngeneration: {max_new_tokens: 2}\n";
    ParseOptions po;
    po.base_dir = dir_.path();
    auto c = ParseCampaignText(text, "tls.yaml", po);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    auto resolved = ResolveCampaign(*c);
    EXPECT_TRUE(resolved.ok()) << resolved.status().ToString();
    auto jobs = ExpandCampaign(*resolved);
    EXPECT_TRUE(jobs.ok() && jobs->size() == 1u);
    return jobs->front();
  };
  {
    const JobSpec job = job_for("");
    HttpExecutor http(HttpExecutorOptions{});
    const JobResult r = http.Execute(job, job.Key(), 1);
    EXPECT_EQ(r.outcome, Outcome::kEngineError);
    EXPECT_EQ(r.error_code, "failed_precondition");
    EXPECT_THAT(r.error_message, HasSubstr("the TLS certificate of " + Url() + " was refused"));
    EXPECT_EQ(http.stats().health_checks, 1);  // not waited on
    EXPECT_EQ(http.stats().requests, 0);
  }
  const JobSpec job = job_for(", ca_file: ca.pem");
  HttpExecutor http(HttpExecutorOptions{});
  const JobResult r = http.Execute(job, job.Key(), 1);
  ASSERT_TRUE(IsAnswerOutcome(r.outcome)) << r.error_message;
  EXPECT_EQ(r.generated_text, " 1234");
  EXPECT_EQ(r.device, Url());
  ASSERT_TRUE(r.stream.has_value());
  EXPECT_EQ(r.stream->events, 2);
  EXPECT_EQ(http.stats().requests, 1);
  EXPECT_EQ(http.stats().retries, 0);
}

}  // namespace
}  // namespace nw
