#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace troupe::detail {

template <class Signature>
class function_ref;

/// A non-owning reference to a callable, for a callback that does not
/// outlive the call it is passed to (a scan's visitor): a template's seam
/// to code compiled once.
template <class R, class... Args>
class function_ref<R(Args...)> {
public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, function_ref> && std::is_invocable_r_v<R, F&, Args...>)
  function_ref(F&& f) noexcept // NOLINT(google-explicit-constructor)
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o, Args... args) -> R {
          return static_cast<R>((*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(args)...));
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

private:
  void* object_;
  R (*call_)(void*, Args...);
};

} // namespace troupe::detail
