#pragma once

// The definitions of <troupe/persistence/error.hpp>'s functions: included by it (header-only) or
// by <troupe/impl/src.hpp> (TROUPE_SEPARATE_COMPILATION), where the
// category is then one object for the whole program.

#include <troupe/persistence/error.hpp>

namespace troupe::persistence {

TROUPE_DECL const std::error_category& error_category() noexcept {
  return troupe::detail::enum_error_category<errc, detail::errors>::instance();
}

} // namespace troupe::persistence
