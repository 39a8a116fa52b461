#include <troupe/testing/tcp_proxy.hpp>

#include "../support.hpp"

#include <catch2/catch.hpp>

#include <asio/read.hpp>

#include <mutex>
#include <optional>

// In a namespace of its own: the tests build several files as one unit.
namespace testing_tcp_proxy_test {

using namespace std::chrono_literals;
namespace tt = troupe::testing;
using asio::ip::tcp;

namespace {

/// A server on 127.0.0.1 that answers every chunk with "ok:" and the chunk,
/// and remembers all it received.
class echo_server {
public:
  echo_server() {
    acceptor_.open(tcp::v4());
    acceptor_.bind({asio::ip::address_v4::loopback(), 0});
    acceptor_.listen();
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~echo_server() {
    asio::post(io_, [this] {
      asio::error_code ignored;
      acceptor_.close(ignored);
      for (auto& s : sockets_) s->close(ignored);
    });
    thread_.join();
  }
  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  std::string received() const {
    std::lock_guard g(mutex_);
    return received_;
  }

private:
  void accept() {
    auto s = std::make_shared<tcp::socket>(io_);
    acceptor_.async_accept(*s, [this, s](asio::error_code ec) {
      if (ec) return;
      sockets_.push_back(s);
      serve(s, std::make_shared<std::array<char, 4096>>());
      accept();
    });
  }
  void serve(std::shared_ptr<tcp::socket> s, std::shared_ptr<std::array<char, 4096>> buf) {
    s->async_read_some(asio::buffer(*buf), [this, s, buf](asio::error_code ec, std::size_t n) {
      if (ec) return;
      auto answer = std::make_shared<std::string>("ok:" + std::string(buf->data(), n));
      {
        std::lock_guard g(mutex_);
        received_.append(buf->data(), n);
      }
      asio::async_write(*s, asio::buffer(*answer), [this, s, buf, answer](asio::error_code e, std::size_t) {
        if (!e) serve(s, buf);
      });
    });
  }
  asio::io_context io_;
  tcp::acceptor acceptor_{io_};
  std::vector<std::shared_ptr<tcp::socket>> sockets_;
  mutable std::mutex mutex_;
  std::string received_;
  std::thread thread_;
};

/// A client of the proxy: sends, and waits a bounded time for an answer.
struct client {
  asio::io_context io;
  tcp::socket s{io};
  explicit client(std::uint16_t port) { s.connect({asio::ip::address_v4::loopback(), port}); }
  void send(std::string_view what) { asio::write(s, asio::buffer(what.data(), what.size())); }
  /// What arrives within `wait`: the bytes, or the error that ended the
  /// connection (eof, reset), or neither (nothing arrived).
  struct answer {
    std::string bytes;
    asio::error_code ec;
    bool nothing() const { return bytes.empty() && !ec; }
  };
  answer receive(std::size_t n, std::chrono::milliseconds wait = 5s) {
    answer a;
    std::string buf(n, '\0');
    bool done = false;
    asio::async_read(s, asio::buffer(buf), [&](asio::error_code ec, std::size_t got) {
      done = true;
      a.ec = ec;
      a.bytes = buf.substr(0, got);
    });
    io.restart();
    io.run_for(wait);
    if (!done) {
      s.cancel();
      io.restart();
      io.run();
      a = {};
    }
    return a;
  }
};

} // namespace

TEST_CASE("a TCP proxy forwards both ways, and cut closes its connections on both sides") {
  echo_server server;
  tt::tcp_proxy proxy("127.0.0.1", server.port());
  client c(proxy.port());
  c.send("hello");
  CHECK(c.receive(8).bytes == "ok:hello");
  CHECK(proxy.accepted() == 1);
  CHECK(test::eventually([&] { return proxy.bytes(tt::flow::to_server) == 5; })); // (counted once written: maybe after the peer read them)
  CHECK(test::eventually([&] { return proxy.bytes(tt::flow::to_client) == 8; })); // (counted once written: maybe after the peer read them)
  proxy.cut();
  auto after = c.receive(1);
  CHECK(after.ec); // eof or reset, at once
  CHECK(proxy.cuts() == 1);
  // A new connection goes through as before.
  client d(proxy.port());
  d.send("again");
  CHECK(d.receive(8).bytes == "ok:again");
}

TEST_CASE("a TCP proxy that refuses closes new connections and forwards again when told") {
  echo_server server;
  tt::tcp_proxy proxy("127.0.0.1", server.port());
  proxy.refuse(true);
  {
    client c(proxy.port());
    auto a = c.receive(1);
    CHECK(a.ec); // closed, nothing forwarded
    CHECK(proxy.refused() == 1);
  }
  proxy.refuse(false);
  client c(proxy.port());
  c.send("up");
  CHECK(c.receive(5).bytes == "ok:up");
  CHECK(server.received() == "up");
}

TEST_CASE("a TCP proxy's partition holds every byte, keeps the connection, and delivers when it heals") {
  echo_server server;
  tt::tcp_proxy proxy("127.0.0.1", server.port());
  client c(proxy.port());
  c.send("a");
  CHECK(c.receive(4).bytes == "ok:a");
  proxy.partition(true);
  c.send("b");
  CHECK(c.receive(4, 300ms).nothing());
  CHECK(server.received() == "a");
  proxy.partition(false);
  CHECK(c.receive(4).bytes == "ok:b");
  CHECK(server.received() == "ab");
}

TEST_CASE("a TCP proxy loses the answer to a chosen request: the server got it, the client sees the connection cut") {
  echo_server server;
  tt::tcp_proxy proxy("127.0.0.1", server.port());
  client c(proxy.port());
  c.send("COMMIT"); // before the rule: it counts for nothing after it
  CHECK(c.receive(9).bytes == "ok:COMMIT");
  proxy.lose_answer_to("COMMIT");
  c.send("BEGIN");
  CHECK(c.receive(8).bytes == "ok:BEGIN");
  c.send("COM");
  CHECK(c.receive(6).bytes == "ok:COM");
  c.send("MIT"); // the request split over two chunks is still found
  auto a = c.receive(6);
  CHECK(a.bytes.empty());
  CHECK(a.ec);
  CHECK(server.received() == "COMMITBEGINCOMMIT");
  CHECK(proxy.cuts() == 1);
}

TEST_CASE("a TCP proxy loses a chosen request: the connection is cut before it reaches the server") {
  echo_server server;
  tt::tcp_proxy proxy("127.0.0.1", server.port());
  client c(proxy.port());
  proxy.lose_request("COMMIT");
  c.send("BEGIN");
  CHECK(c.receive(8).bytes == "ok:BEGIN");
  c.send("COMMIT");
  auto a = c.receive(1);
  CHECK(a.ec);
  CHECK(server.received() == "BEGIN");
  // Only once: a new connection carries it.
  client d(proxy.port());
  d.send("COMMIT");
  CHECK(d.receive(9).bytes == "ok:COMMIT");
}

} // namespace testing_tcp_proxy_test
