#pragma once

#include <string_view>

namespace troupe::detail {

/// The readable name of `T` as the compiler spells it, for error messages.
template <class T>
constexpr std::string_view type_name() noexcept {
#if defined(__clang__) || defined(__GNUC__)
  std::string_view p = __PRETTY_FUNCTION__;
  auto start = p.find("T = ");
  if (start == std::string_view::npos) return p;
  start += 4;
  auto end = p.find_first_of(";]", start);
  return p.substr(start, end - start);
#else
  return "?";
#endif
}

} // namespace troupe::detail
