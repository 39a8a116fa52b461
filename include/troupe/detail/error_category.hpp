#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace troupe::detail {

/// The `std::error_category` of an error enum `E`, described by `Traits`:
/// `Traits::name` (the category's name), `Traits::message(E)` (empty for a
/// value it does not know) and `Traits::condition(E)` (the portable
/// `std::errc` condition the code is equivalent to, if any). One instance
/// per program. Every layer's error enum uses it.
template <class E, class Traits>
class enum_error_category final : public std::error_category {
public:
  const char* name() const noexcept override { return Traits::name; }

  std::string message(int value) const override {
    const std::string_view m = Traits::message(static_cast<E>(value));
    if (m.empty()) return std::string("unknown ") + Traits::name + " error " + std::to_string(value);
    return std::string(m);
  }

  std::error_condition default_error_condition(int value) const noexcept override {
    if (const std::optional<std::errc> c = Traits::condition(static_cast<E>(value)))
      return std::make_error_condition(*c);
    return {value, *this};
  }

  static const enum_error_category& instance() noexcept {
    static const enum_error_category category;
    return category;
  }
};

} // namespace troupe::detail
