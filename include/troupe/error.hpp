#pragma once

/// \file
/// The core's error codes, `troupe::errc`, its `std::error_category`, and
/// `troupe::error`, the exception that carries an error code of any troupe
/// layer together with a message.
///
/// Each layer has its own enum and category: `troupe::errc` (here),
/// `troupe::persistence::errc`, `troupe::delivery::errc` and
/// `troupe::effects::errc`. Every one of them is an `is_error_code_enum`, so
/// `ec == troupe::errc::timeout` works, and each code that has a portable
/// meaning is also equivalent to a `std::errc` condition:
/// `ec == std::errc::timed_out` holds for `troupe::errc::timeout`.

#include <troupe/detail/compile_mode.hpp>
#include <troupe/detail/error_category.hpp>

#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace troupe {

/// What can go wrong in the core (actors, asks, mailboxes), as
/// `std::error_code` values of the category `troupe::error_category()`.
enum class errc {
  /// The actor has stopped (or is stopping); the message was not processed.
  actor_stopped = 1,
  /// An ask received no reply within its timeout. (`std::errc::timed_out`)
  timeout,
  /// The bounded mailbox is full; the message was not enqueued.
  /// (`std::errc::resource_unavailable_try_again`)
  mailbox_full,
  /// The handler threw; the exception's message is in the `troupe::error`'s
  /// `what()`.
  handler_failed,
  /// The actor system is shutting down. (`std::errc::operation_canceled`)
  system_shutdown,
  /// An argument was outside its documented range, in any layer.
  /// (`std::errc::invalid_argument`)
  invalid_argument,
  /// A `reply_promise` was destroyed (or its actor stopped) without an
  /// answer: the ask fails at once instead of waiting for its timeout.
  broken_promise,
  /// A `receive` of the awaitable mailbox got no matching message before
  /// its deadline. (`std::errc::timed_out`)
  receive_timeout,
};

namespace detail {
struct core_errors {
  static constexpr const char* name = "troupe";
  static constexpr std::string_view message(errc e) noexcept {
    switch (e) {
    case errc::actor_stopped: return "actor stopped";
    case errc::timeout: return "timed out";
    case errc::mailbox_full: return "mailbox full";
    case errc::handler_failed: return "handler failed";
    case errc::system_shutdown: return "actor system shutting down";
    case errc::invalid_argument: return "invalid argument";
    case errc::broken_promise: return "reply promise broken (destroyed unanswered)";
    case errc::receive_timeout: return "no matching message before the receive's deadline";
    }
    return {};
  }
  static constexpr std::optional<std::errc> condition(errc e) noexcept {
    switch (e) {
    case errc::timeout: return std::errc::timed_out;
    case errc::mailbox_full: return std::errc::resource_unavailable_try_again;
    case errc::system_shutdown: return std::errc::operation_canceled;
    case errc::invalid_argument: return std::errc::invalid_argument;
    case errc::receive_timeout: return std::errc::timed_out;
    default: return std::nullopt;
    }
  }
};
} // namespace detail

/// The category of every `troupe::errc`. A single instance for the program.
TROUPE_DECL const std::error_category& error_category() noexcept;

/// Makes an `std::error_code` of the core's category; found by ADL, so
/// `std::error_code ec = troupe::errc::timeout;` works.
inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), error_category()}; }

/// The exception thrown (through `use_awaitable` or `use_future`) or passed as
/// an `std::exception_ptr` (through callbacks and `as_tuple`) when an
/// operation fails: `code()` is an error code of one of troupe's layers,
/// `what()` adds the detail (which actor, which message, the handler's own
/// exception message, what the storage engine reported).
class error : public std::system_error {
public:
  explicit error(std::error_code ec) : std::system_error(ec) {}
  error(std::error_code ec, const std::string& what) : std::system_error(ec, what) {}

  template <class E>
    requires std::is_error_code_enum_v<E>
  explicit error(E e) : std::system_error(make_error_code(e)) {}

  template <class E>
    requires std::is_error_code_enum_v<E>
  error(E e, const std::string& what) : std::system_error(make_error_code(e), what) {}
};

/// The error code inside an exception pointer: the `code()` of an
/// `std::system_error`, `errc::handler_failed` for any other exception, and
/// an empty code for a null pointer.
TROUPE_DECL std::error_code error_code_of(const std::exception_ptr& ep) noexcept;

/// The exception inside `ep` as a `troupe::error`: itself, the code and
/// message of another `std::system_error`, or `errc::handler_failed` with
/// the message of any other exception.
TROUPE_DECL error error_of(const std::exception_ptr& ep);

} // namespace troupe

template <>
struct std::is_error_code_enum<troupe::errc> : std::true_type {};

#if defined(TROUPE_HEADER_ONLY)
#include <troupe/impl/error.ipp>
#endif
