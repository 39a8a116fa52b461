#pragma once

/// \file
/// `troupe::delivery::delivery_id`: the stable identity of one reliable
/// delivery, the same on every attempt.

#include <troupe/error.hpp>

#include <compare>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace troupe::delivery {

/// Identifies one logical delivery. Receivers recognise a duplicate by it,
/// so every attempt, before and after any restart, must carry the same one:
/// it comes from business identity (`order:42:picklist`), or is derived from
/// the sender's journal, never drawn at random per attempt.
class delivery_id {
public:
  /// The longest ID accepted, in bytes.
  static constexpr std::size_t max_size = 1024;

  /// From business identity: the parts (strings or integers) joined with
  /// `:`. A `:` or `\` inside a string part is escaped with `\`, so
  /// different parts never give the same ID:
  /// `of("order", 42, "picklist")` is `order:42:picklist`.
  template <class... Parts>
    requires(sizeof...(Parts) > 0)
  static delivery_id of(const Parts&... parts) {
    std::string out;
    bool first = true;
    (append(out, parts, first), ...);
    return delivery_id(std::move(out));
  }

  /// Derived from the sender's journal when there is no business key: the
  /// persistence ID, the sequence number of the event that caused the
  /// delivery and, when one event causes several, their index —
  /// `order-42#17` or `order-42#17.2`. Deterministic: the event's sequence
  /// number never changes, so neither does the ID.
  static delivery_id derived(std::string_view sender_pid, std::uint64_t seq, unsigned index = 0) {
    if (sender_pid.empty())
      throw error(troupe::errc::invalid_argument, "delivery_id::derived: the persistence ID is empty");
    std::string out(sender_pid);
    out += '#';
    out += std::to_string(seq);
    if (index != 0) {
      out += '.';
      out += std::to_string(index);
    }
    return delivery_id(std::move(out));
  }

  /// An ID as the sender already has it. Throws `invalid_argument` if it is
  /// empty or longer than `max_size`.
  explicit delivery_id(std::string value) : value_(std::move(value)) {
    if (value_.empty()) throw error(troupe::errc::invalid_argument, "a delivery ID must not be empty");
    if (value_.size() > max_size)
      throw error(troupe::errc::invalid_argument, "a delivery ID has at most " + std::to_string(max_size) +
                                                      " bytes; got " + std::to_string(value_.size()));
  }

  const std::string& str() const noexcept { return value_; }

  friend bool operator==(const delivery_id&, const delivery_id&) = default;
  friend std::strong_ordering operator<=>(const delivery_id&, const delivery_id&) = default;

private:
  template <class P>
  static void append(std::string& out, const P& part, bool& first) {
    if (!first) out += ':';
    first = false;
    if constexpr (std::is_integral_v<P> && !std::is_same_v<P, bool> && !std::is_same_v<P, char>) {
      out += std::to_string(part);
    } else {
      static_assert(std::is_convertible_v<const P&, std::string_view>,
                    "troupe: delivery_id::of takes strings and integers");
      std::string_view s(part);
      if (s.empty()) throw error(troupe::errc::invalid_argument, "delivery_id::of: a part is empty");
      for (char c : s) {
        if (c == ':' || c == '\\') out += '\\';
        out += c;
      }
    }
  }

  std::string value_;
};

} // namespace troupe::delivery
