// FunctionRef: a non-owning reference to a callable, for a loop that calls
// back into its caller on every step without allocating.
#pragma once

#include <type_traits>
#include <utility>

namespace bitlab {

// A non-owning reference to a callable (what std::function would be without
// its heap allocation for large captures: the steps stay allocation-free).
// The callable must outlive the reference; a temporary lambda passed as an
// argument does.
template <class Signature>
class FunctionRef;
template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef>)
      FunctionRef(F&& f)  // NOLINT(google-explicit-constructor): used like std::function
      : object_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};


}  // namespace bitlab
