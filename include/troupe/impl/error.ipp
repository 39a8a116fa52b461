#pragma once

// The definitions of <troupe/error.hpp>'s functions: included by it (header-only) or
// by <troupe/impl/src.hpp> (TROUPE_SEPARATE_COMPILATION), where the
// category is then one object for the whole program.

#include <troupe/error.hpp>

namespace troupe {

TROUPE_DECL const std::error_category& error_category() noexcept {
  return detail::enum_error_category<errc, detail::core_errors>::instance();
}

TROUPE_DECL std::error_code error_code_of(const std::exception_ptr& ep) noexcept {
  if (!ep) return {};
  try {
    std::rethrow_exception(ep);
  } catch (const std::system_error& e) {
    return e.code();
  } catch (...) {
    return make_error_code(errc::handler_failed);
  }
}

TROUPE_DECL error error_of(const std::exception_ptr& ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const error& e) {
    return e;
  } catch (const std::system_error& e) {
    return error(e.code(), e.what());
  } catch (const std::exception& e) {
    return error(make_error_code(errc::handler_failed), e.what());
  } catch (...) {
    return error(make_error_code(errc::handler_failed), "non-standard exception");
  }
}

} // namespace troupe
