#pragma once

// The body of <troupe/observe/endpoint.hpp>: an acceptor and its
// connections on an io_context of the endpoint's own thread; requests
// parsed by Beast, answered from the actor system's metrics snapshot.

#include <troupe/observe/endpoint.hpp>
#include <troupe/detail/number_text.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <array>
#include <atomic>
#include <cmath>
#include <sstream>
#include <thread>

namespace troupe::observe {

namespace detail {

inline void json_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    default:
      if (c < 0x20) {
        static constexpr char hex[] = "0123456789abcdef";
        out += "\\u00";
        out += hex[c >> 4];
        out += hex[c & 15];
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  out += '"';
}

inline void json_number(std::string& out, double v) {
  if (!std::isfinite(v)) { // JSON has no infinities
    out += "null";
    return;
  }
  troupe::detail::append_finite_number(out, v);
}

namespace http = boost::beast::http;

} // namespace detail

TROUPE_DECL std::string to_json(const metrics_snapshot& s) {
  std::string out = "{\"families\":[";
  bool first_family = true;
  for (const auto& f : s.families()) {
    if (!first_family) out += ',';
    first_family = false;
    out += "{\"name\":";
    detail::json_string(out, f.name);
    out += ",\"help\":";
    detail::json_string(out, f.help);
    out += ",\"type\":";
    detail::json_string(out, f.type == metric_type::counter ? "counter"
                             : f.type == metric_type::gauge ? "gauge"
                                                            : "histogram");
    out += ",\"samples\":[";
    bool first_sample = true;
    for (const auto& m : f.samples) {
      if (!first_sample) out += ',';
      first_sample = false;
      out += "{\"labels\":{";
      bool first_label = true;
      for (const auto& [k, v] : m.labels) {
        if (!first_label) out += ',';
        first_label = false;
        detail::json_string(out, k);
        out += ':';
        detail::json_string(out, v);
      }
      out += '}';
      if (f.type == metric_type::histogram) {
        out += ",\"bounds\":[";
        for (std::size_t i = 0; i < m.bounds.size(); ++i) {
          if (i) out += ',';
          detail::json_number(out, m.bounds[i]);
        }
        out += "],\"cumulative\":[";
        for (std::size_t i = 0; i < m.cumulative.size(); ++i) {
          if (i) out += ',';
          detail::json_number(out, static_cast<double>(m.cumulative[i]));
        }
        out += "],\"sum\":";
        detail::json_number(out, m.sum);
        out += ",\"count\":";
        detail::json_number(out, static_cast<double>(m.count));
      } else {
        out += ",\"value\":";
        detail::json_number(out, m.value);
      }
      out += '}';
    }
    out += "]}";
  }
  out += "]}";
  return out;
}

namespace http = boost::beast::http;

// GCC 12 takes Asio's coroutine frames' own operator new and delete for a
// mismatch (a false positive, seen with -fsanitize=address).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

struct endpoint::impl {
  using tcp = asio::ip::tcp;

  impl(actor_system& s, endpoint_options o) : sys(s), options(std::move(o)), acceptor(io) {
    std::error_code ec;
    const auto address = asio::ip::make_address(options.address, ec);
    if (ec) throw error(errc::invalid_argument, "metrics endpoint: \"" + options.address + "\" is not an IP address");
    const tcp::endpoint at(address, options.port);
    acceptor.open(at.protocol());
    acceptor.set_option(tcp::acceptor::reuse_address(true));
    acceptor.bind(at);
    acceptor.listen();
    bound = acceptor.local_endpoint();
    asio::co_spawn(io, accept(), asio::detached);
    thread = std::thread([this] { io.run(); });
  }

  ~impl() {
    io.stop();
    thread.join();
    // The connections' frames (their sockets) go with the io_context.
  }

  asio::awaitable<void> accept() {
    for (;;) {
      std::error_code ec;
      tcp::socket socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted) co_return;
        continue; // (a connection reset before it was accepted, say)
      }
      if (connections >= options.max_connections) {
        socket.close(ec);
        continue;
      }
      ++connections;
      asio::co_spawn(io, serve(std::move(socket)), asio::detached);
    }
  }

  /// Answers the requests of one connection, one at a time.
  asio::awaitable<void> serve(tcp::socket socket) {
    struct counted {
      std::uint32_t& n;
      ~counted() { --n; }
    } count{connections};
    asio::steady_timer idle(io);
    // Closes the socket when a request does not come in whole in time.
    auto arm = [&] {
      idle.expires_after(options.idle_timeout);
      idle.async_wait([&socket](std::error_code ec) {
        if (!ec) socket.close(ec);
      });
    };
    std::array<char, 4096> buf;
    std::string unparsed; // read, not yet taken by a parser (a pipelined request's start, say)
    for (;;) {
      http::request_parser<http::empty_body> parser;
      parser.header_limit(8 * 1024);
      parser.eager(true);
      boost::beast::error_code bad;
      arm();
      for (;;) {
        if (!unparsed.empty()) {
          const std::size_t took = parser.put(boost::asio::const_buffer(unparsed.data(), unparsed.size()), bad);
          unparsed.erase(0, took);
          if (bad == http::error::need_more)
            bad = {};
          else if (bad)
            break;
          if (parser.is_done()) break;
          if (took > 0 && !unparsed.empty()) continue;
        }
        std::error_code ec;
        const std::size_t n =
            co_await socket.async_read_some(asio::buffer(buf), asio::redirect_error(asio::use_awaitable, ec));
        if (ec) co_return; // closed by the peer, or by the idle timer
        unparsed.append(buf.data(), n);
        // The parser refuses a head past its limit once it sees one whole;
        // bytes that never end a head stop here.
        if (unparsed.size() > 16 * 1024) {
          bad = http::error::header_limit;
          break;
        }
      }
      // (the idle timer still runs: a peer that does not read the reply is
      // closed too)
      const bool head = !bad && parser.get().method() == http::verb::head;
      std::string reply = bad ? respond_bad(bad.message()) : respond(parser.get());
      if (head) reply.resize(reply.find("\r\n\r\n") + 4); // the head of what GET would get
      const bool keep = !bad && parser.get().keep_alive();
      std::error_code ec;
      co_await asio::async_write(socket, asio::buffer(reply), asio::redirect_error(asio::use_awaitable, ec));
      served.fetch_add(1, std::memory_order_relaxed);
      if (ec || !keep) {
        socket.shutdown(tcp::socket::shutdown_both, ec);
        co_return;
      }
    }
  }

  static std::string serialize(http::response<http::string_body>& res) {
    res.set(http::field::server, "troupe");
    res.prepare_payload();
    std::ostringstream os;
    os << res;
    return std::move(os).str();
  }

  std::string respond_bad(const std::string& why) {
    http::response<http::string_body> res{http::status::bad_request, 11};
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    res.keep_alive(false);
    res.body() = "bad request: " + why + "\n";
    return serialize(res);
  }

  std::string respond(const http::request<http::empty_body>& req) {
    http::response<http::string_body> res{http::status::ok, req.version()};
    res.keep_alive(req.keep_alive());
    const auto target = std::string_view(req.target().data(), req.target().size());
    const auto path = target.substr(0, target.find('?'));
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      res.result(http::status::method_not_allowed);
      res.set(http::field::allow, "GET, HEAD");
      res.set(http::field::content_type, "text/plain; charset=utf-8");
      res.body() = "only GET and HEAD\n";
    } else if (path == "/metrics") {
      res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      res.body() = sys.metrics().prometheus();
    } else if (path == "/metrics.json") {
      res.set(http::field::content_type, "application/json");
      res.body() = to_json(sys.metrics());
    } else {
      res.result(http::status::not_found);
      res.set(http::field::content_type, "text/plain; charset=utf-8");
      res.body() = "not found: try /metrics\n";
    }
    res.set(http::field::cache_control, "no-store");
    return serialize(res);
  }

  actor_system& sys;
  const endpoint_options options;
  // Before the io_context: the connections' frames, destroyed with it,
  // count themselves out.
  std::uint32_t connections = 0; // (the io thread's only)
  std::atomic<std::uint64_t> served{0};
  asio::io_context io{1};
  tcp::acceptor acceptor;
  tcp::endpoint bound;
  std::thread thread;
};

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

TROUPE_DECL endpoint::endpoint(actor_system& sys, endpoint_options options)
    : impl_(std::make_unique<impl>(sys, std::move(options))) {}

TROUPE_DECL endpoint::~endpoint() = default;

TROUPE_DECL std::uint16_t endpoint::port() const noexcept { return impl_->bound.port(); }

TROUPE_DECL std::string endpoint::url() const {
  const auto a = impl_->bound.address();
  return "http://" + (a.is_v6() ? "[" + a.to_string() + "]" : a.to_string()) + ":" + std::to_string(port());
}

TROUPE_DECL std::uint64_t endpoint::requests() const noexcept { return impl_->served.load(std::memory_order_relaxed); }

} // namespace troupe::observe
