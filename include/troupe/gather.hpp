#pragma once

/// \file
/// `troupe::gather`: ask many actors at once and wait for every reply, or
/// the first error, within one deadline.

#include <troupe/concepts.hpp>
#include <troupe/error.hpp>
#include <troupe/timeout.hpp>
#include <troupe/detail/ask.hpp>
#include <troupe/detail/stored_handler.hpp>
#include <troupe/detail/system_state.hpp>

#include <asio/async_result.hpp>
#include <asio/bind_executor.hpp>
#include <asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <iterator>
#include <memory>
#include <optional>
#include <ranges>
#include <type_traits>
#include <utility>
#include <vector>

namespace troupe {

namespace detail {

template <class Range>
using gather_ref_t = std::ranges::range_value_t<Range>;

template <class Range, class M>
using gather_reply_t = typename gather_ref_t<Range>::template reply_to<M>;

template <class R>
struct gather_signature {
  using type = void(std::exception_ptr, std::vector<R>);
};
template <>
struct gather_signature<void> {
  using type = void(std::exception_ptr);
};

/// What the asks of one gather share: the replies so far, how many are
/// missing, whether it completed, and the caller's handler.
template <class R, class Handler>
struct gather_state {
  /// One reply, written by the thread that made it: a slot of its own (a
  /// `std::vector<bool>` would pack replies into shared words).
  struct slot {
    std::conditional_t<std::is_void_v<R>, char, R> value{};
  };

  gather_state(Handler&& h, std::size_t n) : handler(std::move(h)), replies(std::is_void_v<R> ? 0 : n), missing(n) {}

  void fail(std::exception_ptr ep) {
    if (done.exchange(true, std::memory_order_acq_rel)) return;
    if constexpr (std::is_void_v<R>)
      handler.defer(std::move(ep));
    else
      handler.defer(std::move(ep), std::vector<R>());
  }

  /// The reply at `i` arrived (the last one completes the gather).
  void arrived() {
    if (missing.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    if (done.exchange(true, std::memory_order_acq_rel)) return;
    if constexpr (std::is_void_v<R>) {
      handler.defer(nullptr);
    } else {
      std::vector<R> out;
      out.reserve(replies.size());
      for (auto& r : replies) out.push_back(std::move(r.value));
      handler.defer(nullptr, std::move(out));
    }
  }

  stored_handler<Handler> handler;
  std::vector<slot> replies;
  std::atomic<std::size_t> missing;
  std::atomic<bool> done{false};
};

/// `timeout`: one for every ask (normalised: `timeout_of`), or none for
/// each ask's default.
template <class Ref, class M, class Token>
auto gather_within(std::vector<Ref> targets, const M& msg, std::optional<std::chrono::nanoseconds> timeout,
                   Token&& token) {
  using ref = Ref;
  using reply = typename ref::template reply_to<std::decay_t<M>>;
  check_ask<std::decay_t<M>, reply>();
  return asio::async_initiate<Token, typename gather_signature<reply>::type>(
      [](auto handler, std::vector<ref> targets, std::decay_t<M> msg, std::optional<std::chrono::nanoseconds> deadline) {
        using state = detail::gather_state<reply, decltype(handler)>;
        auto s = std::make_shared<state>(std::move(handler), targets.size());
        if (targets.empty()) {
          // Known inside the initiating function: posted, never inline.
          if constexpr (std::is_void_v<reply>)
            s->handler.post(nullptr);
          else
            s->handler.post(nullptr, std::vector<reply>());
          return;
        }
        if (deadline && expired(*deadline)) {
          // Known inside the initiating function: posted; nobody is asked.
          auto ep = error_ptr(errc::timeout, "gather of " + std::string(type_name<std::decay_t<M>>()) +
                                                 ": its timeout had passed before it was sent");
          if constexpr (std::is_void_v<reply>)
            s->handler.post(std::move(ep));
          else
            s->handler.post(std::move(ep), std::vector<reply>());
          return;
        }
        // Each reply completes on the caller's executor (an ask from another
        // system's threads is listed with it, and cancelled if it goes
        // first); the last hands the whole to the caller.
        auto ex = s->handler.get_executor();
        for (std::size_t i = 0; i < targets.size(); ++i) {
          auto one = asio::bind_executor(ex, [s, i](std::exception_ptr ep, auto... r) {
            if (ep) return s->fail(std::move(ep));
            if constexpr (sizeof...(r) == 1) ((s->replies[i].value = std::move(r)), ...);
            s->arrived();
          });
          if (deadline)
            targets[i].ask(msg, *deadline, std::move(one));
          else
            targets[i].ask(msg, std::move(one));
        }
      },
      token, std::move(targets), std::decay_t<M>(msg), timeout);
}

} // namespace detail

/// Asks every actor in `refs` (a range of `actor_ref`, `entity_ref` or `typed_ref`)
/// a copy of `msg` at once and completes with every reply, in the order of
/// `refs`, or with the first failure (the replies still outstanding are
/// then ignored). `timeout` is one deadline for all of them (one that has
/// passed, zero or negative, fails at once and asks nobody;
/// `troupe::no_timeout` never expires). An Asio initiating
/// function with signature `void(std::exception_ptr, std::vector<R>)` (or
/// `void(std::exception_ptr)` when the reply type `R` is `void`); with no
/// refs it completes at once with no replies.
///
/// \code
/// std::vector<int> loads = co_await troupe::gather(workers, load{}, std::chrono::milliseconds(50));
/// \endcode
template <std::ranges::input_range Range, class M, class Rep, class Period, class Token = asio::use_awaitable_t<>>
  requires askable<detail::gather_ref_t<Range>, std::decay_t<M>> && std::copy_constructible<std::decay_t<M>>
auto gather(const Range& refs, const M& msg, std::chrono::duration<Rep, Period> timeout, Token&& token = Token{}) {
  std::vector<detail::gather_ref_t<Range>> targets(std::ranges::begin(refs), std::ranges::end(refs));
  return detail::gather_within(std::move(targets), msg, std::optional(detail::timeout_of(timeout)),
                               std::forward<Token>(token));
}

/// As `gather(refs, msg, timeout, token)` with a deadline on the steady clock.
template <std::ranges::input_range Range, class M, class Duration, class Token = asio::use_awaitable_t<>>
  requires askable<detail::gather_ref_t<Range>, std::decay_t<M>> && std::copy_constructible<std::decay_t<M>>
auto gather(const Range& refs, const M& msg, std::chrono::time_point<std::chrono::steady_clock, Duration> deadline,
            Token&& token = Token{}) {
  std::vector<detail::gather_ref_t<Range>> targets(std::ranges::begin(refs), std::ranges::end(refs));
  return detail::gather_within(std::move(targets), msg, std::optional(detail::timeout_until(deadline)),
                               std::forward<Token>(token));
}

/// As `gather(refs, msg, timeout, token)` with each ask under the system's
/// default ask timeout.
template <std::ranges::input_range Range, class M, class Token = asio::use_awaitable_t<>>
  requires askable<detail::gather_ref_t<Range>, std::decay_t<M>> && std::copy_constructible<std::decay_t<M>> &&
           (!detail::is_duration<std::decay_t<Token>>) && (!detail::is_time_point<std::decay_t<Token>>)
auto gather(const Range& refs, const M& msg, Token&& token = Token{}) {
  std::vector<detail::gather_ref_t<Range>> targets(std::ranges::begin(refs), std::ranges::end(refs));
  return detail::gather_within(std::move(targets), msg, std::optional<std::chrono::nanoseconds>(),
                               std::forward<Token>(token));
}

} // namespace troupe
