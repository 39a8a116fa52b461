#pragma once

/// \file
/// What reliable delivery speaks of: the message types it carries, what a
/// receiver's handler gets, and what a sender is told about its deliveries.

#include <troupe/error.hpp>
#include <troupe/delivery/delivery_id.hpp>
#include <troupe/persistence/event.hpp>
#include <troupe/persistence/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace troupe::delivery {

/// A message type that can be delivered: like an event, JSON-convertible
/// with a stable `manifest` (and optional `version`).
template <class M>
concept message_type = persistence::event<M>;

/// The message types a reliable actor accepts as `delivery<M>`.
template <message_type... M>
struct accepts {};

/// What a receiver's handler gets: the delivery ID (the same on every
/// attempt), the sender's name and the message.
template <class M>
struct delivery {
  delivery_id id;
  std::string sender;
  M message;
};

/// A command from outside the reliable actors (a driver, an HTTP handler, a
/// command line), asked of a reliable actor that accepts `M`: its
/// `handle(delivery<M>)` runs once per client and request ID. The events it
/// persists, the deliveries it makes and its reply are written in one
/// atomic write with a dedup mark, and the ask is answered only once that
/// write is durable. Asked again under the same ID (a retry after a
/// timeout, a crash, a lost reply), it is answered with the stored reply
/// and nothing runs — whatever the retry's message says. The handler sees
/// `delivery<M>::sender` as `command_sender(client)`.
///
/// Retry a request for at most the receiver's dedup retention from its
/// first sending: the mark is kept that long from then. With
/// `first_sent_ms` given (the same on every retry), a retry that finds no
/// mark where the store may have dropped one is refused with
/// `errc::request_expired` rather than run again.
template <message_type M>
struct command {
  /// The request ID, the same on every retry (1 to 1,024 bytes).
  delivery_id id;
  M message;
  /// Who asks: request IDs are unique per client (at most 256 bytes).
  std::string client{};
  /// When the client first sent this request (wall clock, milliseconds
  /// since the epoch; 0: not known, and a late retry is not refused).
  std::int64_t first_sent_ms = 0;
};

/// The longest client name a command may carry, in bytes.
inline constexpr std::size_t max_client_size = 256;

/// The sender a command's handler sees: `troupe.command:` and the client.
inline std::string command_sender(std::string_view client) { return "troupe.command:" + std::string(client); }

/// Told to a sender that handles it, once a delivery is confirmed, with the
/// receiver's reply (JSON text) if its handler returned one. A notification:
/// not repeated if the sender crashes right after the confirmation.
struct confirmed {
  delivery_id id;
  std::string to;
  std::optional<std::string> reply;

  /// The reply as an `R` (throws if there is none or it does not convert).
  template <class R>
  R reply_as() const {
    if (!reply) throw error(troupe::errc::invalid_argument, "delivery " + id.str() + " was confirmed without a reply");
    return persistence::from_json_text<R>(*reply);
  }
};

/// Told to a sender that handles it when its receiver rejected a delivery:
/// the receiver's handler failed on it `delivery_options::
/// max_handler_failures` times (`reason`: the last failure). The outcome is
/// durable: the receiver answers every later copy the same way, and the
/// sender no longer redelivers it. A notification, like `confirmed`.
struct delivery_rejected {
  delivery_id id;
  std::string to;
  std::string reason;
};

/// Told to a sender that handles it when a delivery reaches
/// `redelivery_policy::warn_after` attempts.
struct redelivery_warning {
  delivery_id id;
  std::string to;
  std::uint32_t attempts = 0;
};

/// A delivery given up after `redelivery_policy::max_attempts`.
struct dead_letter {
  delivery_id id;
  std::string to;
  std::string manifest;
  std::uint32_t attempts = 0;
  /// When it was given up, in milliseconds since the epoch.
  std::int64_t since_ms = 0;
};

/// Told to a sender that handles it when a delivery becomes a dead letter
/// (the threshold callback).
struct delivery_failed {
  dead_letter letter;
};

} // namespace troupe::delivery
