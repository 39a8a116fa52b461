#pragma once

// A receiver's dedup marks in memory: which deliveries (sender and ID) it
// processed, with the reply, or rejected, or whose handler failed so far,
// in the order they were made (for the retention sweep).

#include <boost/intrusive/list.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
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

  dedup_marks() = default;
  dedup_marks(const dedup_marks&) = delete;
  dedup_marks& operator=(const dedup_marks&) = delete;

  /// The mark of `key`, or null.
  const mark* find(const std::string& key) const {
    auto it = marks_.find(key);
    return it == marks_.end() ? nullptr : &it->second.m;
  }

  /// A mark made now (its time no earlier than the last one's): it replaces
  /// the key's mark, and goes last in the order.
  void add(std::string key, mark m) {
    auto [it, fresh] = marks_.try_emplace(std::move(key));
    auto& e = it->second;
    if (fresh)
      e.key = &it->first;
    else
      e.unlink();
    e.m = std::move(m);
    order_.push_back(e);
  }

  /// Marks read back from the store, in any order.
  void load(std::vector<std::pair<std::string, mark>> found) {
    std::stable_sort(found.begin(), found.end(),
                     [](const auto& a, const auto& b) { return a.second.time_ms < b.second.time_ms; });
    marks_.reserve(marks_.size() + found.size());
    for (auto& [key, m] : found) add(std::move(key), std::move(m));
  }

  /// Forgets up to `max` marks made before `cutoff`, oldest first, and
  /// returns their keys.
  std::vector<std::string> expire(std::int64_t cutoff, std::size_t max) {
    std::vector<std::string> out;
    while (!order_.empty() && out.size() < max && order_.front().m.time_ms < cutoff) {
      out.push_back(*order_.front().key);
      marks_.erase(out.back()); // unlinks it from the order
    }
    return out;
  }

  std::size_t size() const noexcept { return marks_.size(); }

private:
  // A mark, linked into the order the marks were made (it unlinks itself
  // when erased); `key` is its key in `marks_` (nodes do not move).
  struct entry : boost::intrusive::list_base_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>> {
    mark m;
    const std::string* key = nullptr;
  };

  // Declared first: destroyed after the marks, which unlink from it.
  boost::intrusive::list<entry, boost::intrusive::constant_time_size<false>> order_;
  std::unordered_map<std::string, entry> marks_;
};

} // namespace troupe::delivery::detail
