#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace troupe::detail {

template <class Signature>
class unique_function;

/// A move-only `std::function` for slow paths (watchers, backpressure
/// waiters): it can hold Asio completion handlers, which are move-only.
template <class R, class... Args>
class unique_function<R(Args...)> {
public:
  unique_function() = default;

  template <class F>
    requires(!std::is_same_v<std::decay_t<F>, unique_function> && std::is_invocable_r_v<R, std::decay_t<F>&, Args...>)
  unique_function(F&& f) : impl_(std::make_unique<model<std::decay_t<F>>>(std::forward<F>(f))) {}

  explicit operator bool() const noexcept { return impl_ != nullptr; }

  R operator()(Args... args) { return impl_->call(std::forward<Args>(args)...); }

private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual R call(Args... args) = 0;
  };
  template <class F>
  struct model final : concept_t {
    explicit model(F&& f) : f_(std::move(f)) {}
    explicit model(const F& f) : f_(f) {}
    R call(Args... args) override { return f_(std::forward<Args>(args)...); }
    F f_;
  };
  std::unique_ptr<concept_t> impl_;
};

} // namespace troupe::detail
