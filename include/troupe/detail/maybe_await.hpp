#pragma once

#include <troupe/concepts.hpp>
#include <troupe/task.hpp>

#include <type_traits>
#include <utility>

namespace troupe::detail {

/// What `f()` produces: its return value, or what the awaitable it
/// returns produces.
template <class F>
using awaited_result_t = typename awaitable_traits<std::invoke_result_t<F&>>::value_type;

// The coroutine's frame holds `f`, often a lambda of a function whose types
// have internal linkage (an actor in an anonymous namespace): GCC would warn
// that a type of a header has a member of no linkage. The frame is a type of
// that translation unit only, as the lambda is.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsubobject-linkage"
#endif

/// Calls `f()` and, when it returns an awaitable (a coroutine), awaits it:
/// how troupe runs a user's hook that may be either (`on_recovery_completed`,
/// `on_effect`, an adapter's `execute`, a delivery handler). `f` is kept in
/// the coroutine's frame until it completes.
template <class F>
task<awaited_result_t<F>> call_or_await(F f) {
  if constexpr (awaitable_traits<std::invoke_result_t<F&>>::is_awaitable)
    co_return co_await f();
  else if constexpr (std::is_void_v<std::invoke_result_t<F&>>)
    f();
  else
    co_return f();
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

} // namespace troupe::detail
