#pragma once

/// \file
/// `troupe::reply_promise<R>`: answering an ask later, from another message
/// or another actor.

#include <troupe/error.hpp>

#include <exception>
#include <memory>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

namespace troupe {

/// The reply type of a message whose handler answers later (takes a
/// `reply_promise<R>`): the message's `reply_type`, or a specialization of
/// this trait for a message type that cannot name it.
///
/// \code
/// struct fetch { std::string key; using reply_type = std::string; };
/// \endcode
template <class M>
struct reply_of {};

template <class M>
  requires requires { typename M::reply_type; }
struct reply_of<M> {
  using type = typename M::reply_type;
};

template <class R>
class reply_promise;

namespace detail {

/// What a promise answers into (an ask's envelope). Reference-counted by
/// its promise: `release_sink` once the promise is done with it.
template <class R>
class reply_sink {
public:
  /// The answer: an error (`ep`), or the value (`value`, null for `void`;
/// ignored with an error).
  virtual void settle(std::exception_ptr ep, std::add_pointer_t<R> value) noexcept = 0;
  /// The promise went unanswered.
  virtual void abandon() noexcept = 0;
  virtual void release_sink() noexcept = 0;
  /// One reference more (a stashed ask keeps its sink to fail it).
  virtual void retain_sink() noexcept = 0;
  /// A handler holding the promise runs (`true`) or returned (`false`):
  /// an abandonment meanwhile waits for the handler's outcome.
  virtual void handling(bool now) noexcept = 0;

protected:
  ~reply_sink() = default;
};

struct promise_access {
  template <class R>
  static reply_sink<R>* sink(const reply_promise<R>& p) noexcept {
    return p.sink_;
  }
};

} // namespace detail

/// The answer to one ask, to be given later: a handler declared as
/// `void handle(M, troupe::reply_promise<R>)` (where `R` is
/// `reply_of<M>::type`) receives one, may store it or move it into a
/// message to another actor, and answers exactly once — `deliver(value)` or
/// `fail(...)` — from any thread. The asker's reply type is `R`.
///
/// A promise destroyed unanswered fails its ask at once with
/// `errc::broken_promise` (never a timeout): an actor that stops or
/// restarts with parked promises breaks them. A handler that throws before
/// answering fails the ask with `errc::handler_failed`; an answer given
/// before the throw is the ask's reply (the first answer wins), and the
/// exception is still the actor's failure, for its supervision.
/// When the message was told, not asked, nobody waits: `pending()` is
/// false and an answer goes nowhere.
///
/// Move-only. A promise must not outlive the actor system of its asker, nor
/// that of the actor that received it (an ask with a timeout keeps a timer
/// on that system's threads until the promise is answered or destroyed).
///
/// \code
/// void handle(fetch f, troupe::reply_promise<std::string> p) {
///   if (auto it = cache_.find(f.key); it != cache_.end()) return p.deliver(it->second);
///   waiting_[f.key].push_back(std::move(p));       // answered when loaded
/// }
/// \endcode
template <class R>
class reply_promise {
public:
  using value_type = R;

  /// A promise nobody waits for.
  reply_promise() noexcept = default;
  explicit reply_promise(detail::reply_sink<R>* sink) noexcept : sink_(sink) {}

  reply_promise(reply_promise&& o) noexcept : sink_(std::exchange(o.sink_, nullptr)), answered_(o.answered_) {}
  reply_promise& operator=(reply_promise&& o) noexcept {
    if (this != &o) {
      reset();
      sink_ = std::exchange(o.sink_, nullptr);
      answered_ = o.answered_;
    }
    return *this;
  }
  reply_promise(const reply_promise&) = delete;
  reply_promise& operator=(const reply_promise&) = delete;
  ~reply_promise() { reset(); }

  /// Someone waits for the answer (an ask not yet answered).
  bool pending() const noexcept { return sink_ != nullptr; }
  explicit operator bool() const noexcept { return pending(); }

  /// Answers with `value`. Throws `errc::invalid_argument` when the promise
  /// was answered already.
  template <class V = R>
    requires(!std::is_void_v<V>)
  void deliver(std::type_identity_t<V> value) {
    if (auto* s = take()) finish(s, nullptr, std::addressof(value));
  }

  /// Answers an ask whose reply type is `void`.
  template <class V = R>
    requires std::is_void_v<V>
  void deliver() {
    if (auto* s = take()) finish(s, nullptr, nullptr);
  }

  /// Fails the ask with `ep` (the asker sees that exception).
  void fail(std::exception_ptr ep) {
    if (!ep) throw error(errc::invalid_argument, "reply_promise::fail: null exception");
    if (auto* s = take()) finish(s, std::move(ep), nullptr);
  }

  /// Fails the ask with a `troupe::error` of `ec` and `what`.
  void fail(std::error_code ec, const std::string& what = {}) {
    fail(std::make_exception_ptr(what.empty() ? error(ec) : error(ec, what)));
  }

private:
  friend struct detail::promise_access;

  detail::reply_sink<R>* take() {
    if (!sink_) {
      if (answered_) throw error(errc::invalid_argument, "reply_promise: answered already (a promise answers once)");
      return nullptr;
    }
    answered_ = true;
    return std::exchange(sink_, nullptr);
  }

  static void finish(detail::reply_sink<R>* s, std::exception_ptr ep, std::add_pointer_t<R> value) noexcept {
    s->settle(std::move(ep), value);
    s->release_sink();
  }

  void reset() noexcept {
    if (auto* s = std::exchange(sink_, nullptr)) {
      s->abandon();
      s->release_sink();
    }
  }

  detail::reply_sink<R>* sink_ = nullptr;
  bool answered_ = false;
};

} // namespace troupe
