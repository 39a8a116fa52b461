#pragma once

/// \file
/// The persistence layer's error codes: `troupe::persistence::errc` and its
/// category. Invalid arguments are the core's `troupe::errc::invalid_argument`.

#include <troupe/error.hpp>
#include <troupe/detail/compile_mode.hpp>
#include <troupe/detail/error_category.hpp>

#include <optional>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace troupe::persistence {

/// What can go wrong in a journal or a persistent actor, as
/// `std::error_code` values of the category `persistence::error_category()`.
enum class errc {
  /// The store could not read or write (an I/O error, or a failure the
  /// storage engine reported). (`std::errc::io_error`)
  storage_failure = 1,
  /// The store is open in another process (or another store object).
  /// (`std::errc::device_or_resource_busy`)
  store_locked,
  /// The store was written by a newer version of troupe.
  /// (`std::errc::not_supported`)
  store_format_too_new,
  /// A write would reuse or skip sequence numbers of a persistence ID.
  sequence_mismatch,
  /// A stored record could not be decoded (bad checksum, unparsable, an
  /// unknown event type). (`std::errc::bad_message`)
  corrupt_record,
  /// An event is larger than the configured limit. (`std::errc::message_size`)
  event_too_large,
  /// Recovery needs events that are no longer in the journal (deleted, and
  /// no usable snapshot covers them).
  events_missing,
  /// The write was refused before reaching the store (a fault-injecting
  /// journal's `reject_next_writes`); nothing was written.
  write_rejected,
  /// The store is damaged where no crash could have damaged it (a corrupt
  /// WAL record before its end, a damaged table file or manifest); it is
  /// not opened. `rocksdb_options::salvage` opens it without the damage.
  /// (`std::errc::bad_message`)
  corrupt_store,
  /// The disk is full; nothing of the failed write was acknowledged. Writes
  /// succeed again once there is space. (`std::errc::no_space_on_device`)
  storage_full,
  /// Another live actor of this store already has the persistence ID.
  /// (`std::errc::device_or_resource_busy`)
  already_running,
  /// Recovery needs a snapshot that cannot be read or decoded (the events it
  /// covers were deleted): named by persistence ID and sequence number.
  snapshot_unreadable,
  /// A write may only create a key (`table_write::create`) that exists
  /// already: nothing of the write was applied. (`std::errc::file_exists`)
  key_exists,
  /// Another store object (another process, usually) claimed the
  /// persistence ID after this one did: only the newest claimant writes
  /// it. Nothing of the write was applied. (`std::errc::operation_not_permitted`)
  fenced,
};

namespace detail {
struct errors {
  static constexpr const char* name = "troupe.persistence";
  static constexpr std::string_view message(errc e) noexcept {
    switch (e) {
    case errc::storage_failure: return "storage failure";
    case errc::store_locked: return "store locked by another process";
    case errc::store_format_too_new: return "store written by a newer format version";
    case errc::sequence_mismatch: return "sequence numbers not contiguous";
    case errc::corrupt_record: return "corrupt record";
    case errc::event_too_large: return "event too large";
    case errc::events_missing: return "events needed for recovery are missing";
    case errc::write_rejected: return "write rejected";
    case errc::corrupt_store: return "store damaged";
    case errc::storage_full: return "storage full";
    case errc::already_running: return "persistence ID already in use by a live actor";
    case errc::snapshot_unreadable: return "snapshot needed for recovery is unreadable";
    case errc::key_exists: return "key exists already";
    case errc::fenced: return "persistence ID claimed by a newer writer (fenced)";
    }
    return {};
  }
  static constexpr std::optional<std::errc> condition(errc e) noexcept {
    switch (e) {
    case errc::storage_failure: return std::errc::io_error;
    case errc::store_locked: return std::errc::device_or_resource_busy;
    case errc::store_format_too_new: return std::errc::not_supported;
    case errc::corrupt_record: return std::errc::bad_message;
    case errc::event_too_large: return std::errc::message_size;
    case errc::corrupt_store: return std::errc::bad_message;
    case errc::storage_full: return std::errc::no_space_on_device;
    case errc::already_running: return std::errc::device_or_resource_busy;
    case errc::key_exists: return std::errc::file_exists;
    case errc::fenced: return std::errc::operation_not_permitted;
    default: return std::nullopt;
    }
  }
};
} // namespace detail

/// The category of every `persistence::errc`.
TROUPE_DECL const std::error_category& error_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), error_category()}; }

} // namespace troupe::persistence

template <>
struct std::is_error_code_enum<troupe::persistence::errc> : std::true_type {};

#if defined(TROUPE_HEADER_ONLY)
#include <troupe/persistence/impl/error.ipp>
#endif
