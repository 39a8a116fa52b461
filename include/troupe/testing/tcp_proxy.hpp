#pragma once

/// \file
/// `troupe::testing::tcp_proxy`: a TCP proxy on the loopback interface
/// between a client and a server, for fault tests. It forwards bytes both
/// ways and, on command, cuts every connection, refuses new ones (the
/// server is down), holds every byte (a partition: connections stay open,
/// nothing arrives), or loses the server's answer to a chosen request (the
/// connection is cut after the request went through and before its answer
/// comes back: the client cannot know whether it took effect).
///
/// It runs on a thread of its own; every command is applied when it
/// returns.

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace troupe::testing {

/// Which way bytes travel through a `tcp_proxy`.
enum class flow : std::uint8_t { to_server, to_client };

class tcp_proxy {
public:
  /// Listens on 127.0.0.1 (a port the system picks: `port()`) and forwards
  /// every connection to `server_host:server_port`.
  tcp_proxy(std::string server_host, std::uint16_t server_port)
      : server_(asio::ip::make_address(server_host), server_port) {
    acceptor_.open(asio::ip::tcp::v4());
    acceptor_.set_option(asio::ip::tcp::acceptor::reuse_address(true));
    acceptor_.bind({asio::ip::address_v4::loopback(), 0});
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    asio::co_spawn(io_, accept(), asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }

  tcp_proxy(const tcp_proxy&) = delete;
  tcp_proxy& operator=(const tcp_proxy&) = delete;

  ~tcp_proxy() {
    run([this] {
      asio::error_code ignored;
      acceptor_.close(ignored);
      close_all();
    });
    io_.stop();
    thread_.join();
  }

  /// The port the proxy listens on (on 127.0.0.1).
  std::uint16_t port() const noexcept { return port_; }

  /// Closes every open connection, both sides, now: what was in flight is
  /// lost. New connections are forwarded as before.
  void cut() {
    run([this] { close_all(); });
  }

  /// While on, a new connection is closed as soon as it is accepted (a
  /// server that is down); open connections are left as they are (`cut`
  /// them too for a server that went down).
  void refuse(bool on) {
    run([this, on] { refusing_ = on; });
  }

  /// While on, no byte goes through either way; connections stay open, and
  /// what was held is delivered when it ends (a partition that heals, or a
  /// long pause of the network). `cut` while partitioned loses it.
  void partition(bool on) {
    run([this, on] {
      partitioned_ = on;
      if (!on)
        for (auto& w : wakers_) w->cancel();
    });
  }

  /// The next time a chunk that contains `request` goes to the server, it
  /// goes through, and the connection is cut before any answer comes back:
  /// the request may have taken effect, and the client cannot tell.
  void lose_answer_to(std::string request) {
    run([this, r = std::move(request)]() mutable { lose_answer_to_ = std::move(r); });
  }

  /// The next time a chunk that contains `request` goes to the server, it
  /// goes through, its answer comes back, and then the connection is cut
  /// (a server that ends the session, a reset between two statements).
  void cut_after_answer_to(std::string request) {
    run([this, r = std::move(request)]() mutable { cut_after_answer_to_ = std::move(r); });
  }

  /// The next time a chunk that contains `request` goes to the server, it
  /// goes through, and a partition begins (as `partition(true)`): its
  /// answer is held until the partition ends.
  void partition_after(std::string request) {
    run([this, r = std::move(request)]() mutable { partition_after_ = std::move(r); });
  }

  /// The next time a chunk that contains `request` is about to go to the
  /// server, the connection is cut instead: the request never arrives.
  void lose_request(std::string request) {
    run([this, r = std::move(request)]() mutable { lose_request_ = std::move(r); });
  }

  /// Connections accepted so far (refused ones included).
  std::uint64_t accepted() const noexcept { return accepted_.load(); }
  /// Connections refused while `refuse` was on.
  std::uint64_t refused() const noexcept { return refused_.load(); }
  /// Cuts so far, by `cut` or by a lost request or answer.
  std::uint64_t cuts() const noexcept { return cuts_.load(); }
  /// Bytes forwarded so far, `f`'s way.
  std::uint64_t bytes(flow f) const noexcept { return bytes_[static_cast<int>(f)].load(); }

private:
  using tcp = asio::ip::tcp;

  struct link {
    tcp::socket client, server;
    bool closed = false;
    bool answer_lost = false; // the next byte to the client cuts instead
    bool cut_after_answer = false; // the next bytes to the client go through, then the link is cut
    std::array<std::string, 2> tail; // each way's last bytes, for a request split over chunks
    explicit link(asio::io_context& io) : client(io), server(io) {}
    void close() {
      if (closed) return;
      closed = true;
      asio::error_code ignored;
      client.shutdown(tcp::socket::shutdown_both, ignored);
      server.shutdown(tcp::socket::shutdown_both, ignored);
      client.close(ignored);
      server.close(ignored);
    }
  };

  template <class F>
  void run(F f) {
    std::promise<void> done;
    asio::post(io_, [&] {
      f();
      done.set_value();
    });
    done.get_future().get();
  }

  void close_all() {
    for (auto& w : links_)
      if (auto l = w.lock(); l && !l->closed) {
        l->close();
        ++cuts_;
      }
    links_.clear();
  }

  asio::awaitable<void> accept() {
    for (;;) {
      auto l = std::make_shared<link>(io_);
      asio::error_code ec;
      co_await acceptor_.async_accept(l->client, asio::redirect_error(asio::use_awaitable, ec));
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
      if (ec) continue;
      ++accepted_;
      if (refusing_) {
        ++refused_;
        l->close();
        continue;
      }
      asio::co_spawn(io_, connect(std::move(l)), asio::detached);
    }
  }

  asio::awaitable<void> connect(std::shared_ptr<link> l) {
    asio::error_code ec;
    co_await l->server.async_connect(server_, asio::redirect_error(asio::use_awaitable, ec));
    if (ec || l->closed) {
      l->close();
      co_return;
    }
    asio::error_code ignored;
    l->client.set_option(tcp::no_delay(true), ignored);
    l->server.set_option(tcp::no_delay(true), ignored);
    std::erase_if(links_, [](auto& w) { return w.expired(); });
    links_.push_back(l);
    asio::co_spawn(io_, pump(l, flow::to_server), asio::detached);
    asio::co_spawn(io_, pump(l, flow::to_client), asio::detached);
  }

  /// Whether `chunk` completes `what` (which may have begun in the bytes
  /// that went the same way before it; one that ended there does not count).
  static bool holds(link& l, flow f, std::string_view chunk, const std::string& what) {
    if (what.empty()) return false;
    auto& tail = l.tail[static_cast<int>(f)];
    std::string seen = tail;
    seen.append(chunk);
    const auto from = tail.size() >= what.size() - 1 ? tail.size() - (what.size() - 1) : 0;
    return seen.find(what, from) != std::string::npos;
  }

  static void remember(link& l, flow f, std::string_view chunk, std::size_t keep) {
    auto& tail = l.tail[static_cast<int>(f)];
    tail.append(chunk);
    if (tail.size() > keep) tail.erase(0, tail.size() - keep);
  }

  asio::awaitable<void> pump(std::shared_ptr<link> l, flow f) {
    auto& from = f == flow::to_server ? l->client : l->server;
    auto& to = f == flow::to_server ? l->server : l->client;
    std::vector<char> buf(64 * 1024);
    auto waker = std::make_shared<asio::steady_timer>(io_);
    wakers_.push_back(waker);
    for (;;) {
      asio::error_code ec;
      const auto n = co_await from.async_read_some(asio::buffer(buf), asio::redirect_error(asio::use_awaitable, ec));
      if (ec || l->closed) break;
      while (partitioned_ && !l->closed) {
        waker->expires_after(std::chrono::hours(1));
        co_await waker->async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      if (l->closed) break;
      const std::string_view chunk(buf.data(), n);
      if (f == flow::to_client && l->answer_lost) {
        ++cuts_;
        l->close();
        break;
      }
      if (f == flow::to_server) {
        if (holds(*l, f, chunk, lose_request_)) {
          lose_request_.clear();
          ++cuts_;
          l->close();
          break;
        }
        if (holds(*l, f, chunk, lose_answer_to_)) {
          lose_answer_to_.clear();
          l->answer_lost = true; // (before the request leaves: its answer cannot overtake this)
        }
        if (holds(*l, f, chunk, cut_after_answer_to_)) {
          cut_after_answer_to_.clear();
          l->cut_after_answer = true;
        }
        if (holds(*l, f, chunk, partition_after_)) {
          partition_after_.clear();
          partitioned_ = true; // (likewise)
        }
        remember(*l, f, chunk, 64);
      }
      co_await asio::async_write(to, asio::buffer(buf.data(), n), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
      bytes_[static_cast<int>(f)] += n;
      if (f == flow::to_client && l->cut_after_answer) {
        ++cuts_;
        break;
      }
    }
    l->close();
    std::erase(wakers_, waker);
  }

  asio::io_context io_{1};
  tcp::endpoint server_;
  tcp::acceptor acceptor_{io_};
  std::uint16_t port_ = 0;
  std::thread thread_;
  // On the proxy's thread only:
  std::vector<std::weak_ptr<link>> links_;
  std::vector<std::shared_ptr<asio::steady_timer>> wakers_;
  bool refusing_ = false;
  bool partitioned_ = false;
  std::string lose_answer_to_, lose_request_, partition_after_, cut_after_answer_to_;
  // Read anywhere:
  std::atomic<std::uint64_t> accepted_{0}, refused_{0}, cuts_{0};
  std::array<std::atomic<std::uint64_t>, 2> bytes_{};
};

} // namespace troupe::testing
