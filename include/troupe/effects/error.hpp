#pragma once

/// \file
/// The effects layer's error codes: `troupe::effects::errc` and its
/// category. Invalid arguments are the core's `troupe::errc::invalid_argument`.

#include <troupe/error.hpp>
#include <troupe/detail/compile_mode.hpp>
#include <troupe/detail/error_category.hpp>

#include <optional>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace troupe::effects {

/// What can go wrong in the effects layer, as `std::error_code` values of
/// the category `effects::error_category()`.
enum class errc {
  /// An outbox record or an effect's event cannot be read.
  /// (`std::errc::bad_message`)
  corrupt_record = 1,
  /// No adapter is registered for an effect's type.
  no_adapter,
  /// An operation ID another owner started (its record is in the outbox):
  /// refused, nothing written, the first record untouched.
  /// (`std::errc::file_exists`)
  id_in_use,
};

namespace detail {
struct errors {
  static constexpr const char* name = "troupe.effects";
  static constexpr std::string_view message(errc e) noexcept {
    switch (e) {
    case errc::corrupt_record: return "unreadable outbox record";
    case errc::no_adapter: return "no adapter for the effect type";
    case errc::id_in_use: return "operation ID started by another owner";
    }
    return {};
  }
  static constexpr std::optional<std::errc> condition(errc e) noexcept {
    if (e == errc::corrupt_record) return std::errc::bad_message;
    if (e == errc::id_in_use) return std::errc::file_exists;
    return std::nullopt;
  }
};
} // namespace detail

/// The category of every `effects::errc`.
TROUPE_DECL const std::error_category& error_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), error_category()}; }

} // namespace troupe::effects

template <>
struct std::is_error_code_enum<troupe::effects::errc> : std::true_type {};

#if defined(TROUPE_HEADER_ONLY)
#include <troupe/effects/impl/error.ipp>
#endif
