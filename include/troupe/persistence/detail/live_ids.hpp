#pragma once

// The persistence IDs a store's live actors hold: at most one actor per ID.

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace troupe::persistence::detail {

/// Thread-safe. An ID is held by one owner (an actor's ID) from its first
/// instance's construction until the actor has stopped, across restarts.
class live_ids {
public:
  struct outcome {
    bool fresh;          // it was free, and is `owner`'s now
    std::uint64_t other; // not 0: another owner holds it
  };

  /// Holds `pid` for `owner`, unless another owner holds it.
  outcome hold(std::string_view pid, std::uint64_t owner) {
    std::lock_guard g(mutex_);
    auto [it, fresh] = held_.try_emplace(std::string(pid), owner);
    return {fresh, fresh || it->second == owner ? 0 : it->second};
  }

  /// Lets `pid` go, if `owner` holds it.
  void release(std::string_view pid, std::uint64_t owner) noexcept {
    std::lock_guard g(mutex_);
    if (auto it = held_.find(std::string(pid)); it != held_.end() && it->second == owner) held_.erase(it);
  }

  std::size_t size() const {
    std::lock_guard g(mutex_);
    return held_.size();
  }

private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::uint64_t> held_;
};

} // namespace troupe::persistence::detail
