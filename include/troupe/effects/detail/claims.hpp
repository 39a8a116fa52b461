#pragma once

// Which operation IDs the dispatchers of one actor system are executing.

#include <troupe/actor_system.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

namespace troupe::effects::detail {

/// Two dispatchers of one actor system (one store) never run the same ID at
/// once: each claims an ID before an attempt and releases it once the
/// attempt's result is durable. An extension of the actor system.
class claims {
public:
  /// The claims of `sys`'s dispatchers.
  static std::shared_ptr<claims> of(actor_system& sys) {
    return sys.extension_or<claims>([] { return std::make_shared<claims>(); });
  }

  bool try_claim(const std::string& id) {
    std::lock_guard g(m_);
    return held_.insert(id).second;
  }
  void release(const std::string& id) {
    std::lock_guard g(m_);
    held_.erase(id);
  }

private:
  std::mutex m_;
  std::unordered_set<std::string> held_;
};

} // namespace troupe::effects::detail
