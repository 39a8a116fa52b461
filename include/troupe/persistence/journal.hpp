#pragma once

/// \file
/// `troupe::persistence::journal`: the store-independent view of a journal
/// that persistent actors use, and its adapter for any store.

#include <troupe/error.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/detail/unique_function.hpp>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::persistence {

/// A journal as persistent actors see it. Thread-safe.
class journal {
public:
  virtual ~journal() = default;

  /// Appends `events` atomically; `done` runs once they are durable (or the
  /// write failed), on any thread, possibly before `write` returns.
  virtual void write(std::string pid, std::vector<event_record> events,
                     troupe::detail::unique_function<void(std::error_code)> done) = 0;

  /// Streams the events with `from <= seq <= to` to `f`, in order.
  virtual std::error_code replay(std::string_view pid, sequence_nr from, sequence_nr to, std::uint64_t max,
                                 const std::function<void(const event_record&)>& f) = 0;

  /// The highest sequence number ever written for `pid` (0 if none).
  virtual sequence_nr highest_sequence_nr(std::string_view pid) = 0;
};

/// Adapts a store with the `memory_store` / `rocksdb_store` interface.
/// The store must outlive the adapter.
template <class Store>
class journal_of final : public journal {
public:
  explicit journal_of(Store& s) noexcept : store_(s) {}

  void write(std::string pid, std::vector<event_record> events,
             troupe::detail::unique_function<void(std::error_code)> done) override {
    if constexpr (requires { store_.async_write(std::move(pid), std::move(events), [](std::error_code) {}); }) {
      store_.async_write(std::move(pid), std::move(events),
                         [done = std::move(done)](std::error_code ec) mutable { done(ec); });
    } else {
      done(store_.write(pid, events));
    }
  }

  std::error_code replay(std::string_view pid, sequence_nr from, sequence_nr to, std::uint64_t max,
                         const std::function<void(const event_record&)>& f) override {
    return store_.replay(pid, from, to, max, f);
  }

  sequence_nr highest_sequence_nr(std::string_view pid) override { return store_.highest_sequence_nr(pid); }

private:
  Store& store_;
};

} // namespace troupe::persistence
