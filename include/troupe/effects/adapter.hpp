#pragma once

/// \file
/// The adapter contract: how the dispatcher performs an effect on an
/// external system and asks it what happened; and `adapters`, the
/// registry of a dispatcher's adapters by effect type. See docs/effects.md.

#include <troupe/concepts.hpp>
#include <troupe/error.hpp>
#include <troupe/task.hpp>
#include <troupe/effects/retry_policy.hpp>
#include <troupe/effects/detail/erased_adapter.hpp>
#include <troupe/persistence/json.hpp>
#include <troupe/detail/maybe_await.hpp>

#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

namespace troupe::effects {

/// One attempt at an effect, as an adapter sees it.
struct operation {
  /// The stable operation ID. Pass it to the external system as the
  /// idempotency key (or message ID): it is the same on every attempt,
  /// before and after any restart.
  std::string id;
  std::string type;
  /// The request as its owner gave it (JSON text).
  std::string request;
  /// The owner's persistence ID.
  std::string owner;
  /// 1 for the first attempt.
  std::uint32_t attempt = 1;

  template <class R>
  R request_as() const {
    return persistence::from_json_text<R>(request);
  }
};

/// What one `execute` came to.
struct outcome {
  enum class kind : std::uint8_t { completed, failed, unknown };
  outcome::kind what = kind::unknown;
  /// Completed: the external result (JSON text). Otherwise: why.
  std::string detail;
  /// Failed: the system refused for good (a declined card); no retry.
  bool permanent = false;

  /// Performed; `result` is kept with the effect (for example the
  /// provider's payment ID).
  template <class R = std::string>
  static outcome completed(const R& result = {}) {
    return {kind::completed, persistence::to_json_text(result), false};
  }
  /// Certainly not performed (the system said so). Retried while attempts
  /// remain, unless `permanent`.
  static outcome failed(std::string reason, bool permanent = false) {
    return {kind::failed, std::move(reason), permanent};
  }
  /// Perhaps performed, perhaps not: a timeout, a dropped connection, a
  /// 5xx. Never report these as `failed`.
  static outcome unknown(std::string reason) { return {kind::unknown, std::move(reason), false}; }
};

/// What asking the external system about an operation ID came to.
struct query_result {
  enum class kind : std::uint8_t { completed, failed, not_found, unknown };
  query_result::kind what = kind::unknown;
  std::string detail;

  template <class R = std::string>
  static query_result completed(const R& result = {}) {
    return {kind::completed, persistence::to_json_text(result)};
  }
  static query_result failed(std::string reason) { return {kind::failed, std::move(reason)}; }
  /// The system never saw the operation: it may be executed (again).
  static query_result not_found() { return {kind::not_found, {}}; }
  /// The system could not be asked (it did not answer).
  static query_result unknown(std::string reason) { return {kind::unknown, std::move(reason)}; }
};

namespace detail {
template <class X, class R>
concept yields = std::same_as<X, R> || (troupe::detail::awaitable_traits<X>::is_awaitable &&
                                        std::same_as<typename troupe::detail::awaitable_traits<X>::value_type, R>);
} // namespace detail

/// An adapter performs one type of effect: `execute(op)` returns an
/// `outcome` or a `troupe::task<outcome>` (a coroutine, for asynchronous
/// I/O; a plain function runs on the dispatcher's thread and must not
/// block long). It is called for several operations at once, from several
/// threads.
///
/// \code
/// struct payments {
///   static constexpr bool honours_idempotency_keys = true; // optional
///   troupe::task<troupe::effects::outcome> execute(const troupe::effects::operation& op);
///   troupe::task<troupe::effects::query_result> query(const std::string& id); // optional
/// };
/// \endcode
template <class A>
concept adapter = requires(A& a, const operation& op) {
  { a.execute(op) } -> detail::yields<outcome>;
};

/// An adapter whose external system can be asked about an operation ID.
template <class A>
concept queryable_adapter = adapter<A> && requires(A& a, const std::string& id) {
  { a.query(id) } -> detail::yields<query_result>;
};

/// Whether the adapter declares that its external system honours
/// idempotency keys: executing again with the same operation ID never
/// performs the operation twice. Then an unknown outcome may be resolved by
/// executing again.
template <class A>
constexpr bool honours_idempotency_keys() {
  if constexpr (requires { A::honours_idempotency_keys; })
    return static_cast<bool>(A::honours_idempotency_keys);
  else
    return false;
}

/// The adapters of a dispatcher, by effect type.
class adapters {
public:
  /// Performs the effects whose request type has `effect_type == type`,
  /// retried as `policy` says. Throws `invalid_argument` for an empty type,
  /// a null adapter, a policy that is not `valid()`, or a type registered
  /// already.
  template <adapter A>
  adapters& add(std::string type, std::shared_ptr<A> a, retry_policy policy = {}) {
    if (type.empty()) throw error(troupe::errc::invalid_argument, "adapters::add: the effect type is empty");
    if (!a) throw error(troupe::errc::invalid_argument, "adapters::add: the adapter for '" + type + "' is null");
    if (!policy.valid())
      throw error(troupe::errc::invalid_argument,
                  "adapters::add: the retry policy for '" + type +
                      "' needs max_attempts >= 1 and 0 < initial_backoff <= max_backoff");
    detail::erased_adapter e;
    e.policy = std::move(policy);
    e.can_query = queryable_adapter<A>;
    e.idempotent = honours_idempotency_keys<A>();
    e.execute = [a](operation op) {
      return troupe::detail::call_or_await([a, op = std::move(op)] { return a->execute(op); });
    };
    if constexpr (queryable_adapter<A>)
      e.query = [a](std::string id) {
        return troupe::detail::call_or_await([a, id = std::move(id)] { return a->query(id); });
      };
    if (!by_type_.emplace(type, std::move(e)).second)
      throw error(troupe::errc::invalid_argument, "adapters::add: an adapter for '" + type + "' is already registered");
    return *this;
  }

  template <adapter A>
  adapters& add(std::string type, A a, retry_policy policy = {}) {
    return add(std::move(type), std::make_shared<A>(std::move(a)), std::move(policy));
  }

  /// The adapter of `type`, or null.
  const detail::erased_adapter* find(std::string_view type) const {
    auto it = by_type_.find(type);
    return it == by_type_.end() ? nullptr : &it->second;
  }

private:
  std::map<std::string, detail::erased_adapter, std::less<>> by_type_;
};

} // namespace troupe::effects
