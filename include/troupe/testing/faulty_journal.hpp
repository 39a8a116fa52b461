#pragma once

/// \file
/// `troupe::testing::faulty_journal`: a journal wrapper that injects
/// failures and delays, for tests of persistent actors (also users' own).

#include <troupe/persistence/error.hpp>
#include <troupe/persistence/journal.hpp>

#include <asio/steady_timer.hpp>
#include <asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace troupe::testing {

using persistence::event_record;
using persistence::journal;
using persistence::sequence_nr;
using persistence::snapshot_criteria;
using persistence::snapshot_record;
using persistence::table;
using persistence::table_write;

/// Wraps a journal and, on request, fails or rejects the next writes, fails
/// the next replays or snapshot loads, or delays every write's
/// acknowledgement. Thread-safe.
///
/// \code
/// auto store = std::make_shared<troupe::persistence::memory_store>();
/// auto j = std::make_shared<troupe::testing::faulty_journal>(
///     std::make_shared<troupe::persistence::journal_of<troupe::persistence::memory_store>>(store));
/// j->fail_next_writes(1);   // the next persist throws storage_failure; nothing is written
/// \endcode
class faulty_journal final : public journal {
public:
  explicit faulty_journal(std::shared_ptr<journal> inner) : inner_(std::move(inner)) {}

  /// Waits for the work queued on the inner journal's blocking thread, which
  /// may call back into this wrapper (a snapshot save does).
  ~faulty_journal() override {
    std::promise<void> drained;
    inner_->run_blocking([&drained] { drained.set_value(); });
    drained.get_future().wait();
  }

  /// The next `n` writes fail with `storage_failure` without writing
  /// anything (as a failing disk would).
  void fail_next_writes(int n) noexcept { failing_writes_.store(n); }
  /// The next `n` writes are refused with `write_rejected`, nothing written.
  void reject_next_writes(int n) noexcept { rejected_writes_.store(n); }
  /// The next `n` replays fail with `storage_failure` before delivering any
  /// event.
  void fail_next_replays(int n) noexcept { failing_replays_.store(n); }
  /// The next `n` snapshot loads fail with `storage_failure`.
  void fail_next_snapshot_loads(int n, persistence::errc code = persistence::errc::storage_failure) noexcept {
    load_code_.store(static_cast<int>(code));
    failing_loads_.store(n);
  }
  /// Every write is acknowledged `d` after the inner journal acknowledged it
  /// (zero: at once).
  void delay_writes(std::chrono::milliseconds d) noexcept { delay_ms_.store(d.count()); }

  table open_table(std::string_view name) override { return inner_->open_table(name); }
  std::optional<table> find_table(std::string_view name) override { return inner_->find_table(name); }
  void set_expiry(table t, persistence::expiry_fn f) override { inner_->set_expiry(t, std::move(f)); }
  std::error_code drop_expired(table t) override { return inner_->drop_expired(t); }
  std::int64_t expired_through() const noexcept override { return inner_->expired_through(); }

  /// From now on (`true`), the changes of `write_later` wait here, unseen
  /// by reads, until the next write, which carries them first (as a group
  /// commit of a store that takes its time does); lost if that write fails.
  /// Within `write_later`'s contract, and deterministic over any store.
  void defer_later_writes(bool on) {
    std::vector<table_write> held;
    {
      std::lock_guard g(later_mutex_);
      defer_later_ = on;
      if (!on) held.swap(later_);
    }
    if (!held.empty()) inner_->write_later(std::move(held));
  }

  /// Not failed, rejected nor delayed: passed on (or held: `defer_later_writes`).
  void write_later(std::vector<table_write> tables) override {
    {
      std::lock_guard g(later_mutex_);
      if (defer_later_) {
        for (auto& t : tables) later_.push_back(std::move(t));
        return;
      }
    }
    inner_->write_later(std::move(tables));
  }

  void write(std::string pid, std::vector<event_record> events, std::vector<table_write> tables,
             troupe::detail::unique_function<void(std::error_code)> done) override {
    {
      std::lock_guard g(later_mutex_);
      if (!later_.empty()) {
        for (auto& t : tables) later_.push_back(std::move(t));
        tables.swap(later_);
        later_.clear();
      }
    }
    if (take(failing_writes_)) return done(persistence::errc::storage_failure);
    if (take(rejected_writes_)) return done(persistence::errc::write_rejected);
    const auto delay = std::chrono::milliseconds(delay_ms_.load());
    if (delay.count() == 0) return inner_->write(std::move(pid), std::move(events), std::move(tables), std::move(done));
    // The delayed completion holds the timer thread (not this journal):
    // `done` may drop the last reference to this journal, on that thread.
    inner_->write(std::move(pid), std::move(events), std::move(tables),
                  [timers = timers_, delay, done = std::move(done)](std::error_code ec) mutable {
                    auto* pool = &timers->pool();
                    timers->post([timers = std::move(timers), pool, delay, ec, done = std::move(done)]() mutable {
                      auto t = std::make_unique<asio::steady_timer>(*pool, delay);
                      auto& timer = *t;
                      timer.async_wait([t = std::move(t), timers = std::move(timers), ec,
                                        done = std::move(done)](std::error_code) mutable { done(ec); });
                    });
                  });
  }

  void run_blocking(troupe::detail::unique_function<void()> f) override { inner_->run_blocking(std::move(f)); }
  persistence::detail::live_ids& live_ids() noexcept override { return inner_->live_ids(); }
  std::string last_failure() const override { return inner_->last_failure(); }
  persistence::blocking_thread* applier() noexcept override { return inner_->applier(); }

  std::error_code replay(std::string_view pid, sequence_nr from, sequence_nr to, std::uint64_t max,
                         const std::function<void(const event_record&)>& f) override {
    if (take(failing_replays_)) return persistence::errc::storage_failure;
    return inner_->replay(pid, from, to, max, f);
  }

  sequence_nr highest_sequence_nr(std::string_view pid) override { return inner_->highest_sequence_nr(pid); }
  std::error_code claim(std::string_view pid) override { return inner_->claim(pid); }

  std::error_code get(table t, std::string_view key, std::optional<std::string>& out) override {
    return inner_->get(t, key, out);
  }

  bool try_get(table t, std::string_view key, std::optional<std::string>& out) override {
    return inner_->try_get(t, key, out);
  }

  std::error_code scan(table t, std::string_view prefix,
                       const std::function<bool(std::string_view, std::string_view)>& f) override {
    return inner_->scan(t, prefix, f);
  }

  std::error_code scan_from(table t, std::string_view prefix, std::string_view from,
                            const std::function<bool(std::string_view, std::string_view)>& f) override {
    return inner_->scan_from(t, prefix, from, f);
  }

  std::error_code delete_up_to(std::string_view pid, sequence_nr to) override { return inner_->delete_up_to(pid, to); }

  std::error_code save_snapshot(std::string_view pid, const snapshot_record& s) override {
    return inner_->save_snapshot(pid, s);
  }

  std::error_code load_snapshot(std::string_view pid, const snapshot_criteria& c,
                                std::optional<snapshot_record>& out) override {
    out.reset();
    if (take(failing_loads_)) return static_cast<persistence::errc>(load_code_.load());
    return inner_->load_snapshot(pid, c, out);
  }

  std::error_code delete_snapshots(std::string_view pid, const snapshot_criteria& c) override {
    return inner_->delete_snapshots(pid, c);
  }

private:
  static bool take(std::atomic<int>& counter) noexcept {
    int n = counter.load();
    while (n > 0)
      if (counter.compare_exchange_weak(n, n - 1)) return true;
    return false;
  }

  std::shared_ptr<journal> inner_;
  std::atomic<int> failing_writes_{0};
  std::atomic<int> rejected_writes_{0};
  std::atomic<int> failing_replays_{0};
  std::atomic<int> failing_loads_{0};
  std::atomic<int> load_code_{static_cast<int>(persistence::errc::storage_failure)};
  std::atomic<std::int64_t> delay_ms_{0};
  std::mutex later_mutex_;
  bool defer_later_ = false;
  std::vector<table_write> later_; // held write_later changes (defer_later_writes)
  /// The timer thread, shared with the delayed completions under way. The
  /// last of them may end on the thread itself: then it is joined from a
  /// thread of its own.
  static std::shared_ptr<persistence::blocking_thread> make_timers() {
    return {new persistence::blocking_thread("troupe-faulty"), [](persistence::blocking_thread* t) {
              if (t->pool().get_executor().running_in_this_thread())
                std::thread([t] { delete t; }).detach();
              else
                delete t;
            }};
  }

  std::shared_ptr<persistence::blocking_thread> timers_ = make_timers();
};

} // namespace troupe::testing
