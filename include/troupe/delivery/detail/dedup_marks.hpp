#pragma once

// A receiver's dedup marks in memory: which deliveries (sender and ID) it
// processed, with the reply, or rejected, or whose handler failed so far,
// in the order they were made (for the retention sweep).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace troupe::delivery::detail {

class dedup_marks {
public:
  struct mark {
    enum class state : std::uint8_t {
      processed, ///< `reply` is the handler's
      failing,   ///< the handler failed `failures` times, last with `reason`
      rejected,  ///< given up after failures: `reason`
    };
    std::optional<std::string> reply;
    std::int64_t time_ms = 0;
    mark::state what = state::processed;
    std::uint32_t failures = 0;
    std::string reason;

    /// A delivery with this mark is answered from it (not run again).
    bool answers() const noexcept { return what != state::failing; }
  };

  /// The mark of `key`, or null.
  const mark* find(const std::string& key) const {
    auto it = marks_.find(key);
    return it == marks_.end() ? nullptr : &it->second;
  }

  /// A mark made now (its time no earlier than the last one's).
  void add(std::string id, mark m) {
    order_.emplace_back(m.time_ms, id);
    marks_.insert_or_assign(std::move(id), std::move(m));
  }

  /// Marks read back from the store, in any order.
  void load(std::vector<std::pair<std::string, mark>> found) {
    std::vector<std::pair<std::int64_t, std::string>> order;
    order.reserve(found.size());
    for (auto& [id, m] : found) {
      order.emplace_back(m.time_ms, id);
      marks_.insert_or_assign(std::move(id), std::move(m));
    }
    std::sort(order.begin(), order.end());
    order_.assign(std::make_move_iterator(order.begin()), std::make_move_iterator(order.end()));
  }

  /// Forgets up to `max` marks made before `cutoff`, oldest first, and
  /// returns their IDs.
  std::vector<std::string> expire(std::int64_t cutoff, std::size_t max) {
    std::vector<std::string> out;
    while (!order_.empty() && out.size() < max && order_.front().first < cutoff) {
      auto id = std::move(order_.front().second);
      order_.pop_front();
      auto it = marks_.find(id);
      if (it == marks_.end() || it->second.time_ms >= cutoff) continue;
      marks_.erase(it);
      out.push_back(std::move(id));
    }
    return out;
  }

  std::size_t size() const noexcept { return marks_.size(); }

private:
  std::unordered_map<std::string, mark> marks_;
  std::deque<std::pair<std::int64_t, std::string>> order_;
};

} // namespace troupe::delivery::detail
