#pragma once

// The target of a polymorphic Asio executor, if it is of a given type.

#include <asio/execution/any_executor.hpp>

#include <typeinfo>

namespace troupe::detail {

/// `ex.target<E>()` if `ex` (an `asio::any_io_executor` or another
/// `execution::any_executor`) holds an `E`, else null. Asio 1.22's
/// `target<E>()` casts whatever it holds, so the type is checked here.
template <class E, class AnyExecutor>
const E* target_as(const AnyExecutor& ex) noexcept {
  if (ex.target_type() != typeid(E)) return nullptr;
  return ex.template target<E>();
}

} // namespace troupe::detail
