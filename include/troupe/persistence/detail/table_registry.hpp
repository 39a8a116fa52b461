#pragma once

// The names of a store's tables and the numbers its `table` values carry.

#include <troupe/error.hpp>
#include <troupe/persistence/records.hpp>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::persistence::detail {

/// Thread-safe. Numbers are handed out from 1 in registration order and
/// never change; at most `capacity` tables, so a store can size its
/// per-table arrays once and read them without a lock.
class table_registry {
public:
  static constexpr std::size_t capacity = 64;

  /// The table named `name`, if registered.
  std::optional<table> find(std::string_view name) const {
    std::lock_guard g(mutex_);
    for (std::size_t i = 0; i < names_.size(); ++i)
      if (names_[i] == name) return table(static_cast<std::uint32_t>(i + 1));
    return std::nullopt;
  }

  /// Registers `name` (which `find` did not find). Throws `invalid_argument`
  /// for an empty name, or past `capacity`.
  table add(std::string_view name) {
    if (name.empty()) throw error(troupe::errc::invalid_argument, "a table name must not be empty");
    std::lock_guard g(mutex_);
    if (names_.size() == capacity)
      throw error(troupe::errc::invalid_argument, "a store has at most " + std::to_string(capacity) + " tables");
    names_.emplace_back(name);
    return table(static_cast<std::uint32_t>(names_.size()));
  }

  /// `find`, or else `add`.
  table find_or_add(std::string_view name) {
    std::lock_guard g(adding_);
    if (auto t = find(name)) return *t;
    return add(name);
  }

  /// The table's slot (0 to capacity - 1), or `capacity` if `t` is not one
  /// of this registry's.
  std::size_t slot(table t) const noexcept {
    const std::size_t i = t.index_;
    std::lock_guard g(mutex_);
    return i >= 1 && i <= names_.size() ? i - 1 : capacity;
  }

  /// Slot without the lock, for a `t` obtained from `find_or_add` (the
  /// caller's synchronization made the registration visible).
  static std::size_t slot_of(table t) noexcept { return t.index_ == 0 ? capacity : t.index_ - 1; }

  std::string name(table t) const {
    std::lock_guard g(mutex_);
    const std::size_t i = t.index_;
    return i >= 1 && i <= names_.size() ? names_[i - 1] : std::string("(no table)");
  }

  /// Every registered name, in registration order.
  std::vector<std::string> names() const {
    std::lock_guard g(mutex_);
    return names_;
  }

private:
  std::mutex adding_; // find_or_add's
  mutable std::mutex mutex_;
  std::vector<std::string> names_;
};

} // namespace troupe::persistence::detail
