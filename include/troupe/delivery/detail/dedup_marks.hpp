#pragma once

// The dedup marks a receiver keeps in memory: which deliveries (sender and
// ID) it processed, with the reply, or rejected, or whose handler failed so
// far — the most recent ones, up to a capacity (the store's table holds
// them all).

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

  /// Keeps at most `capacity` marks (at least one).
  explicit dedup_marks(std::size_t capacity = 256) : capacity_(std::max<std::size_t>(1, capacity)) {}
  dedup_marks(const dedup_marks&) = delete;
  dedup_marks& operator=(const dedup_marks&) = delete;

  /// The mark of `key`, or null.
  const mark* find(const std::string& key) const {
    auto it = marks_.find(key);
    return it == marks_.end() ? nullptr : &it->second.m;
  }

  /// A mark made or read now: it replaces the key's mark and is the most
  /// recent; past the capacity the least recent goes.
  void add(std::string key, mark m) {
    auto [it, fresh] = marks_.try_emplace(std::move(key));
    auto& e = it->second;
    if (fresh)
      e.key = &it->first;
    else
      e.unlink();
    e.m = std::move(m);
    order_.push_back(e);
    while (marks_.size() > capacity_) marks_.erase(*order_.front().key); // unlinks it from the order
  }

  /// Forgets the mark of `key`, if there is one.
  void erase(const std::string& key) { marks_.erase(key); }

  std::size_t size() const noexcept { return marks_.size(); }
  std::size_t capacity() const noexcept { return capacity_; }

private:
  // A mark, linked into the order the marks were added (it unlinks itself
  // when erased); `key` is its key in `marks_` (nodes do not move).
  struct entry : boost::intrusive::list_base_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>> {
    mark m;
    const std::string* key = nullptr;
  };

  // Declared first: destroyed after the marks, which unlink from it.
  boost::intrusive::list<entry, boost::intrusive::constant_time_size<false>> order_;
  std::unordered_map<std::string, entry> marks_;
  std::size_t capacity_;
};

} // namespace troupe::delivery::detail
