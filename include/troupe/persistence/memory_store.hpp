#pragma once

/// \file
/// `troupe::persistence::memory_store`: the journal and snapshot store in
/// memory, for tests. Same interface and semantics as `rocksdb_store`.

#include <troupe/error.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/persistence/detail/codec.hpp>
#include <troupe/persistence/detail/live_ids.hpp>
#include <troupe/persistence/detail/table_registry.hpp>
#include <troupe/detail/clock.hpp>
#include <troupe/detail/stored_handler.hpp>

#include <asio/async_result.hpp>

#include <array>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::persistence {

/// A journal and snapshot store held in memory. Thread-safe. Nothing
/// survives the object; use it in tests and wherever persistence is not
/// wanted.
class memory_store {
public:
  /// The persistence IDs its live actors hold (one actor per ID).
  detail::live_ids& live_ids() noexcept { return live_ids_; }

  // -- tables -----------------------------------------------------------------

  /// The table named `name`, created on first use. Throws
  /// `invalid_argument` for an empty name.
  table open_table(std::string_view name) { return tables_.find_or_add(name); }
  /// The table named `name` if it was opened, without creating it.
  std::optional<table> find_table(std::string_view name) const { return tables_.find(name); }

  /// Values of `t` whose time `f` gives has passed are dropped by
  /// `drop_expired` (this store rewrites nothing on its own).
  void set_expiry(table t, expiry_fn f) {
    const auto slot = tables_.slot(t);
    if (slot == detail::table_registry::capacity) return;
    std::lock_guard g(mutex_);
    expiry_[slot] = std::move(f);
  }

  /// The expiry floor (`journal::expired_through`): the latest time a
  /// `drop_expired` dropped values up to.
  std::int64_t expired_through() const noexcept {
    std::lock_guard g(mutex_);
    return expired_through_;
  }

  /// Drops the values of `t` that have expired by now.
  std::error_code drop_expired(table t) {
    const auto slot = tables_.slot(t);
    if (slot == detail::table_registry::capacity) return troupe::errc::invalid_argument;
    std::lock_guard g(mutex_);
    auto& f = expiry_[slot];
    if (!f) return {};
    const auto now = troupe::detail::now_ms();
    expired_through_ = std::max(expired_through_, now);
    std::erase_if(data_[slot], [&](const auto& kv) {
      const auto e = f(kv.first, kv.second);
      return e && *e <= now;
    });
    return {};
  }

  // -- journal ----------------------------------------------------------------

  /// Appends `events` atomically (all or none). Their sequence numbers must
  /// continue the ID's highest one without a gap: otherwise
  /// `errc::sequence_mismatch` and nothing is written.
  std::error_code write(std::string_view pid, const std::vector<event_record>& events) {
    return write(pid, events, {});
  }

  /// Appends `events` and applies `tables`, atomically. With no events, the
  /// persistence ID may be empty.
  std::error_code write(std::string_view pid, const std::vector<event_record>& events,
                        const std::vector<table_write>& tables) {
    if (!events.empty() && !detail::valid_pid(pid)) return troupe::errc::invalid_argument;
    for (auto& e : events)
      if (e.manifest.size() > detail::max_manifest || !detail::valid_metadata(e.metadata))
        return troupe::errc::invalid_argument;
    for (auto& w : tables)
      if (tables_.slot(w.table) == detail::table_registry::capacity) return troupe::errc::invalid_argument;
    std::lock_guard g(mutex_);
    id_state* s = nullptr;
    if (!events.empty()) {
      s = &ids_[std::string(pid)];
      if (s->highest > max_sequence_nr - events.size()) return errc::sequence_mismatch; // none after the largest
      for (std::size_t i = 0; i < events.size(); ++i)
        if (events[i].seq != s->highest + 1 + i) return errc::sequence_mismatch;
    }
    for (auto& w : tables)
      if (w.only_new && data_[detail::table_registry::slot_of(w.table)].contains(w.key)) return errc::key_exists;
    for (auto& w : tables) {
      auto& t = data_[detail::table_registry::slot_of(w.table)];
      if (w.value)
        t.insert_or_assign(w.key, *w.value);
      else if (auto it = t.find(w.key); it != t.end())
        t.erase(it);
    }
    if (s) {
      const auto now = troupe::detail::now_ms();
      for (auto& e : events) {
        auto& stored = s->events[e.seq] = e;
        if (stored.metadata.written_ms == 0) stored.metadata.written_ms = now;
      }
      s->highest = events.back().seq;
    }
    return {};
  }

  /// The value of `key` in table `t` (empty if none).
  std::error_code get(table t, std::string_view key, std::optional<std::string>& out) {
    out.reset();
    const auto slot = tables_.slot(t);
    if (slot == detail::table_registry::capacity) return troupe::errc::invalid_argument;
    std::lock_guard g(mutex_);
    auto& m = data_[slot];
    if (auto it = m.find(key); it != m.end()) out = it->second;
    return {};
  }

  /// Calls `f(key, value)` for the keys of table `t` that start with
  /// `prefix`, in key order, until it returns false.
  template <class F>
  std::error_code scan(table t, std::string_view prefix, F&& f) {
    return scan_from(t, prefix, prefix, std::forward<F>(f));
  }

  /// As `scan`, from the first key at or after `from`.
  template <class F>
  std::error_code scan_from(table t, std::string_view prefix, std::string_view from, F&& f) {
    const auto slot = tables_.slot(t);
    if (slot == detail::table_registry::capacity) return troupe::errc::invalid_argument;
    std::vector<std::pair<std::string, std::string>> found;
    {
      std::lock_guard g(mutex_);
      auto& m = data_[slot];
      for (auto it = m.lower_bound(std::max(prefix, from)); it != m.end() && it->first.starts_with(prefix); ++it)
        found.emplace_back(*it);
    }
    for (auto& [k, v] : found)
      if (!f(std::string_view(k), std::string_view(v))) break;
    return {};
  }

  /// As `write`, completing with `void(std::error_code)` on the handler's
  /// executor.
  template <class Token>
  auto async_write(std::string pid, std::vector<event_record> events, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code)>(
        [this](auto handler, std::string pid, std::vector<event_record> events) {
          troupe::detail::stored_handler<decltype(handler)> h(std::move(handler));
          h.post(write(pid, events));
        },
        token, std::move(pid), std::move(events));
  }

  /// Calls `f(const event_record&)` for the events with `from <= seq <= to`,
  /// in order, at most `max` of them.
  template <class F>
  std::error_code replay(std::string_view pid, sequence_nr from, sequence_nr to, std::uint64_t max, F&& f) {
    // In chunks, without holding the lock while `f` runs: memory stays
    // bounded and `f` may use the store.
    if (!detail::valid_pid(pid)) return troupe::errc::invalid_argument;
    constexpr std::size_t chunk = 256;
    std::vector<event_record> out;
    std::uint64_t passed = 0;
    while (from <= to && passed < max) {
      out.clear();
      {
        std::lock_guard g(mutex_);
        auto it = ids_.find(pid);
        if (it == ids_.end()) return {};
        for (auto e = it->second.events.lower_bound(from);
             e != it->second.events.end() && e->first <= to && out.size() < chunk && passed + out.size() < max; ++e)
          out.push_back(e->second);
      }
      if (out.empty()) break;
      for (auto& e : out) f(e);
      passed += out.size();
      if (out.back().seq == max_sequence_nr) break;
      from = out.back().seq + 1;
    }
    return {};
  }

  /// The highest sequence number ever written for `pid` (0 if none); it
  /// never decreases, also when events are deleted. Throws
  /// `invalid_argument` for an invalid ID.
  sequence_nr highest_sequence_nr(std::string_view pid) {
    detail::check_pid(pid);
    std::lock_guard g(mutex_);
    auto it = ids_.find(pid);
    return it == ids_.end() ? 0 : it->second.highest;
  }

  /// Deletes the events with `seq <= to`.
  std::error_code delete_up_to(std::string_view pid, sequence_nr to) {
    if (!detail::valid_pid(pid)) return troupe::errc::invalid_argument;
    std::lock_guard g(mutex_);
    auto it = ids_.find(pid);
    if (it == ids_.end()) return {};
    auto& ev = it->second.events;
    ev.erase(ev.begin(), ev.upper_bound(to));
    return {};
  }

  // -- snapshots --------------------------------------------------------------

  /// Saves a snapshot; one at the same sequence number is overwritten.
  std::error_code save_snapshot(std::string_view pid, const snapshot_record& s) {
    if (!detail::valid_pid(pid) || !detail::valid_metadata(s.metadata)) return troupe::errc::invalid_argument;
    std::lock_guard g(mutex_);
    auto& stored = ids_[std::string(pid)].snapshots[s.seq] = s;
    if (stored.metadata.written_ms == 0) stored.metadata.written_ms = troupe::detail::now_ms();
    return {};
  }

  /// The latest snapshot matching `c`, if any.
  std::error_code load_snapshot(std::string_view pid, const snapshot_criteria& c, std::optional<snapshot_record>& out) {
    out.reset();
    if (!detail::valid_pid(pid)) return troupe::errc::invalid_argument;
    std::lock_guard g(mutex_);
    auto it = ids_.find(pid);
    if (it == ids_.end()) return {};
    auto& snaps = it->second.snapshots;
    for (auto s = snaps.rbegin(); s != snaps.rend(); ++s) {
      if (c.matches(s->second)) {
        out = s->second;
        break;
      }
    }
    return {};
  }

  std::error_code delete_snapshot(std::string_view pid, sequence_nr seq) {
    if (!detail::valid_pid(pid)) return troupe::errc::invalid_argument;
    std::lock_guard g(mutex_);
    auto it = ids_.find(pid);
    if (it != ids_.end()) it->second.snapshots.erase(seq);
    return {};
  }

  std::error_code delete_snapshots(std::string_view pid, const snapshot_criteria& c) {
    if (!detail::valid_pid(pid)) return troupe::errc::invalid_argument;
    std::lock_guard g(mutex_);
    auto it = ids_.find(pid);
    if (it == ids_.end()) return {};
    std::erase_if(it->second.snapshots, [&](auto& kv) { return c.matches(kv.second); });
    return {};
  }

private:
  struct id_state {
    sequence_nr highest = 0;
    std::map<sequence_nr, event_record> events;
    std::map<sequence_nr, snapshot_record> snapshots;
  };
  mutable std::mutex mutex_;
  std::int64_t expired_through_ = std::numeric_limits<std::int64_t>::min();
  detail::live_ids live_ids_;
  std::map<std::string, id_state, std::less<>> ids_;
  detail::table_registry tables_;
  std::array<std::map<std::string, std::string, std::less<>>, detail::table_registry::capacity> data_;
  std::array<expiry_fn, detail::table_registry::capacity> expiry_;
};

} // namespace troupe::persistence
