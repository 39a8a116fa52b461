#pragma once

/// \file
/// troupe's error codes: `troupe::errc`, its `std::error_category`, and the
/// exception type that carries one of them together with a message.

#include <string>
#include <system_error>
#include <type_traits>

namespace troupe {

/// Everything that can go wrong in troupe, as `std::error_code` values of
/// troupe's own category (`troupe::error_category()`).
///
/// Compare with `ec == troupe::errc::timeout`; an `std::error_code` made from an
/// `errc` names the failure in `ec.message()`.
enum class errc {
  /// The actor has stopped (or is stopping); the message was not processed.
  actor_stopped = 1,
  /// An ask received no reply within its timeout.
  timeout,
  /// The bounded mailbox is full; the message was not enqueued.
  mailbox_full,
  /// The handler threw; the exception's message is in the `system_error`'s
  /// `what()`.
  handler_failed,
  /// The actor system is shutting down.
  system_shutdown,
  /// An argument was outside its documented range.
  invalid_argument,

  // -- persistence --
  /// The store could not read or write (I/O error, disk full, corruption
  /// reported by the storage engine).
  storage_failure = 100,
  /// The store is open in another process (or another store object).
  store_locked,
  /// The store was written by a newer version of troupe.
  store_format_too_new,
  /// A write would reuse or skip sequence numbers of a persistence ID.
  sequence_mismatch,
  /// A stored record could not be decoded (bad checksum, unparsable).
  corrupt_record,
  /// An event is larger than the configured limit.
  event_too_large,
  /// Recovery needs events that are no longer in the journal (deleted, and
  /// no usable snapshot covers them).
  events_missing,
  /// The write was refused before reaching the store (a fault-injecting
  /// journal's `reject_next_writes`); nothing was written.
  write_rejected,

  // -- delivery --
  /// A sender has as many unconfirmed deliveries as its policy allows
  /// (`redelivery_policy::max_unconfirmed`); nothing was recorded.
  delivery_backlog_full = 200,
  /// A delivery's message type is not one the receiver accepts.
  unknown_message,
};

namespace detail {

class error_category_impl final : public std::error_category {
public:
  const char* name() const noexcept override { return "troupe"; }

  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
    case errc::actor_stopped: return "actor stopped";
    case errc::timeout: return "timed out";
    case errc::mailbox_full: return "mailbox full";
    case errc::handler_failed: return "handler failed";
    case errc::system_shutdown: return "actor system shutting down";
    case errc::invalid_argument: return "invalid argument";
    case errc::storage_failure: return "storage failure";
    case errc::store_locked: return "store locked by another process";
    case errc::store_format_too_new: return "store written by a newer format version";
    case errc::sequence_mismatch: return "sequence numbers not contiguous";
    case errc::corrupt_record: return "corrupt record";
    case errc::event_too_large: return "event too large";
    case errc::events_missing: return "events needed for recovery are missing";
    case errc::write_rejected: return "write rejected";
    case errc::delivery_backlog_full: return "too many unconfirmed deliveries";
    case errc::unknown_message: return "message type not accepted by the receiver";
    }
    return "unknown troupe error " + std::to_string(value);
  }
};

} // namespace detail

/// The category of every `troupe::errc`. A single instance for the program.
inline const std::error_category& error_category() noexcept {
  static const detail::error_category_impl instance;
  return instance;
}

/// Makes an `std::error_code` of troupe's category; found by ADL, so
/// `std::error_code ec = troupe::errc::timeout;` works.
inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

/// The exception thrown (through `use_awaitable` or `use_future`) or passed as
/// an `std::exception_ptr` (through callbacks and `as_tuple`) when an
/// operation fails: `code()` is a `troupe::errc`, `what()` adds the detail
/// (which actor, which message, the handler's own exception message).
class error : public std::system_error {
public:
  explicit error(errc e) : std::system_error(make_error_code(e)) {}
  error(errc e, const std::string& what) : std::system_error(make_error_code(e), what) {}
};

/// The error code inside an exception pointer produced by troupe: the `code()`
/// of an `std::system_error`, `errc::handler_failed` for any other exception,
/// and an empty code for a null pointer.
inline std::error_code error_code_of(const std::exception_ptr& ep) noexcept {
  if (!ep) return {};
  try {
    std::rethrow_exception(ep);
  } catch (const std::system_error& e) {
    return e.code();
  } catch (...) {
    return make_error_code(errc::handler_failed);
  }
}

} // namespace troupe

template <>
struct std::is_error_code_enum<troupe::errc> : std::true_type {};
