#pragma once

// Recovery in two stages: the thread that reads the journal hands records,
// in chunks, to a second thread that decodes and applies them in order.

#include <troupe/persistence/blocking_thread.hpp>
#include <troupe/persistence/records.hpp>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <mutex>
#include <vector>

namespace troupe::persistence::detail {

/// Owned by the reading thread, which calls `push` for every record and then
/// `finish` (or `abandon` when the read failed). `consume` runs on
/// `applier`, one chunk after the other, never two at once; without an
/// applier, or for a replay shorter than a chunk, it runs inline. At most
/// `max_ready` chunks (of 512 records or 1 MiB) wait: memory stays bounded,
/// the reader waits. Chunks go back to the reader to be refilled, so the
/// records' memory is allocated and freed on one thread.
template <class Consume>
class replay_pipeline {
public:
  static constexpr std::size_t chunk_size = 512;
  static constexpr std::size_t chunk_bytes = 1 << 20;
  static constexpr std::size_t max_ready = 4;

  replay_pipeline(blocking_thread* applier, Consume& consume) : applier_(applier), consume_(consume) {
    current_.records.reserve(chunk_size);
  }
  replay_pipeline(const replay_pipeline&) = delete;
  replay_pipeline& operator=(const replay_pipeline&) = delete;
  ~replay_pipeline() { abandon(); }

  /// Reading thread. Throws what `consume` threw (which ends the read).
  void push(const event_record& r) {
    // Chunks come back from the applier with their strings: assigning into
    // them reuses that memory (no allocation freed on the other thread).
    auto& records = current_.records;
    if (current_.size < records.size())
      records[current_.size] = r;
    else
      records.push_back(r);
    current_.bytes += r.payload.size() + r.manifest.size();
    if (++current_.size == chunk_size || current_.bytes >= chunk_bytes) hand_off();
  }

  /// Reading thread, after the last record: returns once every record is
  /// consumed; rethrows what `consume` threw.
  void finish() {
    if (!applier_ || !started_) {
      consume_inline();
      return;
    }
    if (current_.size != 0) hand_off();
    std::unique_lock l(mutex_);
    changed_.wait(l, [&] { return !running_ && (ready_.empty() || failure_); });
    if (failure_) std::rethrow_exception(failure_);
  }

  /// Reading thread: drops what is queued and waits until `consume` no
  /// longer runs.
  void abandon() noexcept {
    std::unique_lock l(mutex_);
    ready_.clear();
    changed_.wait(l, [&] { return !running_; });
  }

private:
  struct chunk {
    std::vector<event_record> records;
    std::size_t size = 0;
    std::size_t bytes = 0;
  };

  void consume_inline() {
    for (std::size_t i = 0; i < current_.size; ++i) consume_(current_.records[i]);
    current_.size = 0;
    current_.bytes = 0;
  }

  void hand_off() {
    if (!applier_) return consume_inline();
    std::unique_lock l(mutex_);
    changed_.wait(l, [&] { return ready_.size() < max_ready || failure_; });
    if (failure_) {
      changed_.wait(l, [&] { return !running_; });
      std::rethrow_exception(failure_);
    }
    ready_.push_back(std::move(current_));
    if (!spare_.empty()) {
      current_ = std::move(spare_.back());
      spare_.pop_back();
    } else {
      current_ = {};
      current_.records.reserve(chunk_size);
    }
    current_.size = 0;
    current_.bytes = 0;
    started_ = true;
    if (!running_) {
      running_ = true;
      l.unlock();
      applier_->post([this] { drain(); });
    }
  }

  /// Applier thread.
  void drain() {
    chunk c;
    for (;;) {
      {
        std::lock_guard g(mutex_);
        if (!c.records.empty()) spare_.push_back(std::move(c));
        if (ready_.empty() || failure_) {
          running_ = false;
          changed_.notify_all();
          return;
        }
        c = std::move(ready_.front());
        ready_.pop_front();
        changed_.notify_all();
      }
      try {
        for (std::size_t i = 0; i < c.size; ++i) consume_(c.records[i]);
      } catch (...) {
        std::lock_guard g(mutex_);
        failure_ = std::current_exception();
        ready_.clear();
        running_ = false;
        changed_.notify_all();
        return;
      }
    }
  }

  blocking_thread* applier_;
  Consume& consume_;
  chunk current_;
  bool started_ = false;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<chunk> ready_;
  std::vector<chunk> spare_;
  bool running_ = false;
  std::exception_ptr failure_;
};

} // namespace troupe::persistence::detail
