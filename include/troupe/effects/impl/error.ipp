#pragma once

// The definitions of <troupe/effects/error.hpp>'s functions: included by it (header-only) or
// by <troupe/impl/src.hpp> (TROUPE_SEPARATE_COMPILATION), where the
// category is then one object for the whole program.

#include <troupe/effects/error.hpp>

namespace troupe::effects {

TROUPE_DECL const std::error_category& error_category() noexcept {
  return troupe::detail::enum_error_category<errc, detail::errors>::instance();
}

} // namespace troupe::effects
