#pragma once

/// \file
/// `troupe::task<T>`: the return type of a coroutine handler.

// A standard header first: Asio picks its allocation functions from the
// library configuration, which must be the same in every translation unit.
#include <cstddef>

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>

namespace troupe {

/// What a coroutine handler returns: an Asio awaitable, so inside it every
/// Asio operation and every troupe ask can be `co_await`ed with the default
/// `use_awaitable` token.
///
/// \code
/// troupe::task<int> handle(lookup m) {
///   int v = co_await store_.ask(get{m.key});
///   co_return v + 1;
/// }
/// \endcode
template <class T = void>
using task = asio::awaitable<T, asio::any_io_executor>;

} // namespace troupe
