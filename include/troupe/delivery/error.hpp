#pragma once

/// \file
/// The delivery layer's error codes: `troupe::delivery::errc` and its
/// category. Invalid arguments are the core's `troupe::errc::invalid_argument`;
/// a failed write is the persistence layer's `storage_failure`.

#include <troupe/error.hpp>
#include <troupe/detail/compile_mode.hpp>
#include <troupe/detail/error_category.hpp>

#include <optional>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace troupe::delivery {

/// What can go wrong in reliable delivery, as `std::error_code` values of
/// the category `delivery::error_category()`.
enum class errc {
  /// A sender has as many unconfirmed deliveries as its policy allows
  /// (`redelivery_policy::max_unconfirmed`); nothing was recorded.
  /// (`std::errc::resource_unavailable_try_again`)
  backlog_full = 1,
  /// A delivery's message type is not one the receiver accepts.
  unknown_message,
  /// A record in the delivery tables cannot be read. (`std::errc::bad_message`)
  corrupt_record,
  /// A message larger than `delivery_options::max_message_bytes`; nothing
  /// was recorded. (`std::errc::message_size`)
  message_too_large,
  /// A re-queue of a dead letter the receiver may have forgotten (see
  /// `requeue`); nothing changed. (`std::errc::operation_not_permitted`)
  requeue_refused,
  /// A delivery under an ID the sender has unconfirmed to another receiver
  /// (an ID names one delivery of its sender); nothing was recorded.
  /// (`std::errc::file_exists`)
  id_in_use,
  /// A command the receiver's handler failed on `max_handler_failures`
  /// times: every retry under its request ID gets this, and nothing runs.
  /// (`std::errc::operation_canceled`)
  rejected,
  /// A command retried later than the receiver's dedup retention from its
  /// first sending, with no mark: it may have run and been forgotten, so it
  /// is not run. (`std::errc::timed_out`)
  request_expired,
};

namespace detail {
struct errors {
  static constexpr const char* name = "troupe.delivery";
  static constexpr std::string_view message(errc e) noexcept {
    switch (e) {
    case errc::backlog_full: return "too many unconfirmed deliveries";
    case errc::unknown_message: return "message type not accepted by the receiver";
    case errc::corrupt_record: return "unreadable delivery record";
    case errc::message_too_large: return "message larger than the delivery limit";
    case errc::requeue_refused: return "re-queue refused: the receiver may have forgotten the delivery";
    case errc::id_in_use: return "delivery ID unconfirmed to another receiver";
    case errc::rejected: return "command rejected: its handler failed too often";
    case errc::request_expired: return "command retried after the receiver's dedup retention";
    }
    return {};
  }
  static constexpr std::optional<std::errc> condition(errc e) noexcept {
    switch (e) {
    case errc::backlog_full: return std::errc::resource_unavailable_try_again;
    case errc::corrupt_record: return std::errc::bad_message;
    case errc::message_too_large: return std::errc::message_size;
    case errc::requeue_refused: return std::errc::operation_not_permitted;
    case errc::id_in_use: return std::errc::file_exists;
    case errc::rejected: return std::errc::operation_canceled;
    case errc::request_expired: return std::errc::timed_out;
    default: return std::nullopt;
    }
  }
};
} // namespace detail

/// The category of every `delivery::errc`.
TROUPE_DECL const std::error_category& error_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), error_category()}; }

} // namespace troupe::delivery

template <>
struct std::is_error_code_enum<troupe::delivery::errc> : std::true_type {};

#if defined(TROUPE_HEADER_ONLY)
#include <troupe/delivery/impl/error.ipp>
#endif
