#include <troupe/observe/endpoint.hpp>

#include "../support.hpp"

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include <string>
#include <vector>

namespace observe_endpoint_test {

using asio::ip::tcp;
using namespace std::chrono_literals;

/// Sends `request` as is on a new connection and reads until the server
/// closes it (or `limit` bytes came).
std::string talk(std::uint16_t port, const std::string& request, std::size_t limit = 1 << 20) {
  asio::io_context io;
  tcp::socket s(io);
  s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  asio::write(s, asio::buffer(request));
  std::string out;
  char buf[4096];
  std::error_code ec;
  while (out.size() < limit) {
    const auto n = s.read_some(asio::buffer(buf), ec);
    if (ec) break;
    out.append(buf, n);
  }
  return out;
}

std::string get(std::uint16_t port, const std::string& target, const std::string& method = "GET") {
  return talk(port, method + " " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST_CASE("prometheus: GET /metrics answers the system's snapshot as text 0.0.4 on loopback") {
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  sys.metric_registry().make_counter("app_things_total", "Things").add(42);
  troupe::observe::endpoint ep(sys);
  CHECK(ep.url() == "http://127.0.0.1:" + std::to_string(ep.port()));
  const auto r = get(ep.port(), "/metrics");
  CHECK(r.starts_with("HTTP/1.1 200 OK\r\n"));
  CHECK(r.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n") != std::string::npos);
  CHECK(r.find("\r\n\r\n# HELP ") != std::string::npos);
  CHECK(r.find("\napp_things_total 42\n") != std::string::npos);
  CHECK(r.find("\n# TYPE troupe_actors_live gauge\n") != std::string::npos);
  const auto j = get(ep.port(), "/metrics.json?x=1");
  CHECK(j.find("Content-Type: application/json\r\n") != std::string::npos);
  CHECK(
      j.find(R"({"name":"app_things_total","help":"Things","type":"counter","samples":[{"labels":{},"value":42}]})") !=
      std::string::npos);
}

TEST_CASE("prometheus: the endpoint answers 404, 405, HEAD, and 400 for what does not parse") {
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  troupe::observe::endpoint ep(sys);
  CHECK(get(ep.port(), "/nothing").starts_with("HTTP/1.1 404 Not Found\r\n"));
  const auto post = get(ep.port(), "/metrics", "POST");
  CHECK(post.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"));
  CHECK(post.find("Allow: GET, HEAD\r\n") != std::string::npos);
  const auto head = get(ep.port(), "/metrics", "HEAD");
  CHECK(head.starts_with("HTTP/1.1 200 OK\r\n"));
  CHECK(head.ends_with("\r\n\r\n")); // no body
  CHECK(head.find("Content-Length: 0\r\n") == std::string::npos);
  CHECK(talk(ep.port(), "NOT HTTP AT ALL\r\n\r\n").starts_with("HTTP/1.1 400 Bad Request\r\n"));
  // A body where none is taken.
  CHECK(talk(ep.port(), "GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")
            .starts_with("HTTP/1.1 400 Bad Request\r\n"));
  // A head past 8 KiB.
  CHECK(talk(ep.port(), "GET /metrics HTTP/1.1\r\nX-Long: " + std::string(9000, 'a') + "\r\n\r\n")
            .starts_with("HTTP/1.1 400 Bad Request\r\n"));
  // Bytes that never end a head.
  CHECK(talk(ep.port(), "GET /metrics HTTP/1.1\r\nX: " + std::string(40000, 'a'))
            .starts_with("HTTP/1.1 400 Bad Request\r\n"));
  CHECK(get(ep.port(), "/metrics").starts_with("HTTP/1.1 200 OK\r\n")); // and it still serves
}

TEST_CASE("prometheus: pipelined requests on one connection are answered in order") {
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  troupe::observe::endpoint ep(sys);
  const std::string one = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  const auto r = talk(ep.port(), one + one + "GET /nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(count(r, "HTTP/1.1 200 OK\r\n") == 2);
  CHECK(count(r, "HTTP/1.1 404 Not Found\r\n") == 1);
  CHECK(r.rfind("HTTP/1.1 404") > r.rfind("HTTP/1.1 200"));
  CHECK(ep.requests() == 3);
}

TEST_CASE("prometheus: an idle connection is closed after idle_timeout; connections past the limit at once") {
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  troupe::observe::endpoint ep(sys, {.idle_timeout = 200ms, .max_connections = 2});
  asio::io_context io;
  const tcp::endpoint at(asio::ip::make_address("127.0.0.1"), ep.port());
  tcp::socket a(io), b(io), c(io);
  // Each served once, so both are accepted and counted before c comes.
  const std::string once = "GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n";
  for (auto* s : {&a, &b}) {
    s->connect(at);
    asio::write(*s, asio::buffer(once));
    std::string head;
    char one;
    while (!head.ends_with("\r\n\r\n") && s->read_some(asio::buffer(&one, 1))) head += one;
    REQUIRE(head.starts_with("HTTP/1.1 404"));
    std::string body(std::stoul(head.substr(head.find("Content-Length: ") + 16)), '\0');
    asio::read(*s, asio::buffer(body));
  }
  asio::write(a, asio::buffer(std::string("GET /metrics HTTP/1.1\r\n"))); // never ends its head
  c.connect(at);
  char buf[64];
  std::error_code ec;
  const auto started = std::chrono::steady_clock::now();
  (void)c.read_some(asio::buffer(buf), ec);
  CHECK(ec == asio::error::eof); // the third: closed at once
  CHECK(std::chrono::steady_clock::now() - started < 150ms);
  (void)a.read_some(asio::buffer(buf), ec);
  CHECK((ec == asio::error::eof || ec == asio::error::connection_reset));
  CHECK(std::chrono::steady_clock::now() - started >= 100ms);
  // Once those are closed, a new one is served.
  b.close();
  CHECK(test::eventually([&] { return get(ep.port(), "/metrics").starts_with("HTTP/1.1 200 OK\r\n"); }));
}

TEST_CASE(
    "prometheus: an address that is not an IP address is refused with invalid_argument, and a port in use throws") {
  troupe::actor_system sys(troupe::system_config{.threads = 1});
  try {
    troupe::observe::endpoint ep(sys, {.address = "localhost"});
    FAIL("accepted a host name");
  } catch (const troupe::error& e) {
    CHECK(e.code() == troupe::errc::invalid_argument);
    CHECK(std::string(e.what()).find("\"localhost\" is not an IP address") != std::string::npos);
  }
  troupe::observe::endpoint first(sys);
  CHECK_THROWS_AS(troupe::observe::endpoint(sys, {.port = first.port()}), std::system_error);
}

} // namespace observe_endpoint_test
