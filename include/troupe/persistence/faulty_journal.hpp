#pragma once

/// \file
/// `troupe::persistence::faulty_journal`: a journal wrapper that injects
/// failures, for tests of persistent actors (also users' own).

#include <troupe/persistence/journal.hpp>

#include <atomic>
#include <memory>

namespace troupe::persistence {

/// Wraps a journal and fails, on request, the next writes or replays with
/// `errc::storage_failure`. Thread-safe.
///
/// \code
/// auto store = std::make_shared<memory_store>();
/// auto j = std::make_shared<faulty_journal>(std::make_shared<journal_of<memory_store>>(*store));
/// j->fail_next_writes(1);   // the next persist throws; nothing is written
/// \endcode
class faulty_journal final : public journal {
public:
  explicit faulty_journal(std::shared_ptr<journal> inner) : inner_(std::move(inner)) {}

  /// The next `n` writes fail without writing anything.
  void fail_next_writes(int n) noexcept { failing_writes_.store(n); }
  /// The next `n` replays fail before delivering any event.
  void fail_next_replays(int n) noexcept { failing_replays_.store(n); }

  void write(std::string pid, std::vector<event_record> events,
             troupe::detail::unique_function<void(std::error_code)> done) override {
    if (take(failing_writes_)) return done(errc::storage_failure);
    inner_->write(std::move(pid), std::move(events), std::move(done));
  }

  std::error_code replay(std::string_view pid, sequence_nr from, sequence_nr to, std::uint64_t max,
                         const std::function<void(const event_record&)>& f) override {
    if (take(failing_replays_)) return errc::storage_failure;
    return inner_->replay(pid, from, to, max, f);
  }

  sequence_nr highest_sequence_nr(std::string_view pid) override { return inner_->highest_sequence_nr(pid); }

private:
  static bool take(std::atomic<int>& counter) noexcept {
    int n = counter.load();
    while (n > 0)
      if (counter.compare_exchange_weak(n, n - 1)) return true;
    return false;
  }

  std::shared_ptr<journal> inner_;
  std::atomic<int> failing_writes_{0};
  std::atomic<int> failing_replays_{0};
};

} // namespace troupe::persistence
