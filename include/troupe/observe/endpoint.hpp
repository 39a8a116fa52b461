#pragma once

/// \file
/// `troupe::observe::endpoint`: a small HTTP server of an actor system's
/// metrics, in Prometheus' text format (`GET /metrics`) and as JSON
/// (`GET /metrics.json`, what the dashboard reads). Off unless made; bound
/// to loopback unless told otherwise. CMake target `troupe::observe` (Boost's
/// headers: Beast parses the requests; the sockets are troupe's Asio).
///
///     troupe::actor_system sys;
///     troupe::observe::endpoint metrics(sys, {.port = 9464});
///     // curl http://127.0.0.1:9464/metrics
///
/// Clients are untrusted: a request's head is limited to 8 KiB, a request
/// with a body is refused, an idle or slow connection is closed after
/// `endpoint_options::idle_timeout`, and at most
/// `endpoint_options::max_connections` are served at once (more are closed
/// at once).

#include <troupe/actor_system.hpp>
#include <troupe/error.hpp>
#include <troupe/metrics.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace troupe::observe {

struct endpoint_options {
  /// The address to listen on: loopback unless told otherwise.
  std::string address = "127.0.0.1";
  /// 0: a free port chosen by the system (`endpoint::port()` says which).
  std::uint16_t port = 0;
  /// A connection that sends no complete request for this long is closed.
  std::chrono::milliseconds idle_timeout{10'000};
  std::uint32_t max_connections = 64;
};

/// Serves the metrics of one actor system over HTTP, on a thread of its
/// own (a scrape never takes a worker from the actors). Must be destroyed
/// before its actor system. Not copyable or movable.
class endpoint {
public:
  /// Listens at once. Throws `troupe::error` with `errc::invalid_argument`
  /// for an address that is not an IP address, or `std::system_error` when
  /// the address cannot be bound (a port in use, say).
  TROUPE_DECL endpoint(actor_system& sys, endpoint_options options = {});
  /// Stops listening, closes every connection and joins the thread.
  TROUPE_DECL ~endpoint();
  endpoint(const endpoint&) = delete;
  endpoint& operator=(const endpoint&) = delete;

  /// The port it listens on.
  TROUPE_DECL std::uint16_t port() const noexcept;
  /// `http://address:port`.
  TROUPE_DECL std::string url() const;
  /// Requests answered so far (any status).
  TROUPE_DECL std::uint64_t requests() const noexcept;

  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

/// The snapshot as JSON: `{"families":[{"name":..,"help":..,"type":..,
/// "samples":[{"labels":{..},"value":..}, ...]}]}`, a histogram's samples
/// with `bounds`, `cumulative`, `sum` and `count` instead of `value`.
TROUPE_DECL std::string to_json(const metrics_snapshot& s);

} // namespace troupe::observe

#if defined(TROUPE_HEADER_ONLY)
#include <troupe/observe/impl/endpoint.ipp>
#endif
