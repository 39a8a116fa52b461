#pragma once

/// \file
/// `troupe::testing::faulty_file_system`: a RocksDB file system that injects
/// I/O errors and a full disk, loses or tears unsynced data at a simulated
/// crash, and flips bits in files at rest; for tests of stores (also users'
/// own). Give it to a store with `rocksdb_options::file_system`.

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace troupe::testing {

/// Wraps a RocksDB `FileSystem` (the default: the real one) and, on request:
///
/// - fails operations of a kind (`io_op`) with an I/O error or "no space",
///   the next `n` of them or each with a probability (seeded: a seed replays
///   the same faults for the same sequence of operations);
/// - simulates a crash (`crash()`): from then on nothing reaches the disk,
///   and once the store is gone `lose_unsynced()` cuts every file back to
///   what was synced, keeping a random part of the rest (a torn write);
/// - flips bits in files at rest (`flip_bit`, a static helper).
///
/// Thread-safe. Injected faults are counted (`injected()`).
class faulty_file_system final : public rocksdb::FileSystemWrapper {
public:
  /// What an injected fault fails.
  enum class io_op { write, sync, read, rename };
  /// What it fails with.
  enum class fault { io_error, no_space };

  explicit faulty_file_system(std::uint64_t seed = 1,
                              std::shared_ptr<rocksdb::FileSystem> base = rocksdb::FileSystem::Default())
      : rocksdb::FileSystemWrapper(std::move(base)), rng_(seed) {}

  static const char* kClassName() { return "troupe.faulty_file_system"; }
  const char* Name() const override { return kClassName(); }

  // -- injection ---------------------------------------------------------------

  /// The next `n` operations of kind `op` on files whose name contains
  /// `name_part` (every file if empty) fail with `f`, after the first
  /// `skip` of them succeed.
  void fail_next(io_op op, fault f, int n = 1, std::string name_part = {}, int skip = 0) {
    std::lock_guard g(mutex_);
    rules_.push_back({op, f, n, 0.0, std::move(name_part), skip});
  }

  /// Each operation of kind `op` on a matching file fails with `f` with
  /// probability `p`, until `clear()`.
  void fail_randomly(io_op op, fault f, double p, std::string name_part = {}) {
    std::lock_guard g(mutex_);
    rules_.push_back({op, f, -1, p, std::move(name_part), 0});
  }

  /// A full disk from now on: every write fails with "no space" until
  /// `clear()`.
  void fill_disk() { fail_randomly(io_op::write, fault::no_space, 1.0); }

  /// Removes every injection rule (a crash stays).
  void clear() {
    std::lock_guard g(mutex_);
    rules_.clear();
  }

  /// Each sync of a file whose name contains `name_part` (WAL files by
  /// default) takes `d` longer: a slow disk (zero: none).
  void delay_syncs(std::chrono::milliseconds d, std::string name_part = ".log") {
    std::lock_guard g(mutex_);
    sync_delay_ = d;
    sync_delay_part_ = std::move(name_part);
  }

  /// Faults injected so far.
  std::uint64_t injected() const noexcept { return injected_.load(); }

  // -- crashes -----------------------------------------------------------------

  /// From now on every write, sync, rename and deletion fails and changes
  /// nothing on disk, as if the machine had stopped: what was synced is
  /// what survives. Destroy the store, then call `lose_unsynced()`.
  void crash() { crashed_.store(true); }

  bool crashed() const noexcept { return crashed_.load(); }

  /// After `crash()` and once nothing uses the files: cuts each file
  /// written since its last sync back to its synced size plus a random
  /// part of what followed (a torn write; none if `tear` is false), then
  /// forgets the crash.
  void lose_unsynced(bool tear = true) {
    std::lock_guard g(mutex_);
    for (auto& [name, f] : files_) {
      if (f.size <= f.synced) continue;
      std::error_code ec;
      const auto on_disk = std::filesystem::file_size(name, ec);
      if (ec) continue;
      auto keep = f.synced;
      if (tear) keep += std::uniform_int_distribution<std::uint64_t>(0, f.size - f.synced)(rng_);
      if (keep < on_disk) std::filesystem::resize_file(name, keep, ec);
    }
    files_.clear();
    crashed_.store(false);
  }

  // -- files at rest -------------------------------------------------------------

  /// Flips bit `bit` (0-7) of the byte at `offset` of file `path`.
  static void flip_bit(const std::filesystem::path& path, std::uint64_t offset, int bit = 0) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    if (!f) throw std::runtime_error("flip_bit: cannot open " + path.string());
    f.seekg(static_cast<std::streamoff>(offset));
    char c = 0;
    if (!f.get(c)) throw std::runtime_error("flip_bit: " + path.string() + " is shorter than the offset");
    c = static_cast<char>(c ^ (1 << (bit & 7)));
    f.seekp(static_cast<std::streamoff>(offset));
    f.put(c);
    if (!f.flush()) throw std::runtime_error("flip_bit: cannot write " + path.string());
  }

  // -- the file system -------------------------------------------------------------

  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    if (auto s = check(io_op::write, fname); !s.ok()) return s;
    std::unique_ptr<rocksdb::FSWritableFile> inner;
    auto s = target()->NewWritableFile(fname, opts, &inner, dbg);
    if (s.ok()) *result = std::make_unique<writable>(std::move(inner), *this, fname, 0);
    return s;
  }

  rocksdb::IOStatus ReopenWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override {
    if (auto s = check(io_op::write, fname); !s.ok()) return s;
    std::unique_ptr<rocksdb::FSWritableFile> inner;
    auto s = target()->ReopenWritableFile(fname, opts, &inner, dbg);
    if (s.ok()) {
      std::uint64_t size = 0;
      (void)target()->GetFileSize(fname, rocksdb::IOOptions{}, &size, dbg);
      *result = std::make_unique<writable>(std::move(inner), *this, fname, size);
    }
    return s;
  }

  rocksdb::IOStatus ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                                      const rocksdb::FileOptions& opts,
                                      std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* dbg) override {
    if (auto s = check(io_op::write, fname); !s.ok()) return s;
    std::unique_ptr<rocksdb::FSWritableFile> inner;
    auto s = target()->ReuseWritableFile(fname, old_fname, opts, &inner, dbg);
    if (s.ok()) *result = std::make_unique<writable>(std::move(inner), *this, fname, 0);
    return s;
  }

  rocksdb::IOStatus NewRandomAccessFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                        std::unique_ptr<rocksdb::FSRandomAccessFile>* result,
                                        rocksdb::IODebugContext* dbg) override {
    if (auto s = check(io_op::read, fname); !s.ok()) return s;
    std::unique_ptr<rocksdb::FSRandomAccessFile> inner;
    auto s = target()->NewRandomAccessFile(fname, opts, &inner, dbg);
    if (s.ok()) *result = std::make_unique<random_access>(std::move(inner), *this, fname);
    return s;
  }

  rocksdb::IOStatus NewSequentialFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                      std::unique_ptr<rocksdb::FSSequentialFile>* result,
                                      rocksdb::IODebugContext* dbg) override {
    if (auto s = check(io_op::read, fname); !s.ok()) return s;
    std::unique_ptr<rocksdb::FSSequentialFile> inner;
    auto s = target()->NewSequentialFile(fname, opts, &inner, dbg);
    if (s.ok()) *result = std::make_unique<sequential>(std::move(inner), *this, fname);
    return s;
  }

  rocksdb::IOStatus RenameFile(const std::string& src, const std::string& target_name, const rocksdb::IOOptions& opts,
                               rocksdb::IODebugContext* dbg) override {
    if (auto s = check(io_op::rename, src); !s.ok()) return s;
    auto s = target()->RenameFile(src, target_name, opts, dbg);
    if (s.ok()) {
      std::lock_guard g(mutex_);
      if (auto it = files_.find(src); it != files_.end()) {
        files_[target_name] = it->second;
        files_.erase(src);
      }
    }
    return s;
  }

  rocksdb::IOStatus DeleteFile(const std::string& fname, const rocksdb::IOOptions& opts,
                               rocksdb::IODebugContext* dbg) override {
    if (crashed()) return rocksdb::IOStatus::IOError("faulty_file_system: crashed");
    auto s = target()->DeleteFile(fname, opts, dbg);
    if (s.ok()) {
      std::lock_guard g(mutex_);
      files_.erase(fname);
    }
    return s;
  }

  rocksdb::IOStatus Truncate(const std::string& fname, size_t size, const rocksdb::IOOptions& opts,
                             rocksdb::IODebugContext* dbg) override {
    if (auto s = check(io_op::write, fname); !s.ok()) return s;
    return target()->Truncate(fname, size, opts, dbg);
  }

  rocksdb::IOStatus LinkFile(const std::string& src, const std::string& target_name, const rocksdb::IOOptions& opts,
                             rocksdb::IODebugContext* dbg) override {
    if (auto s = check(io_op::rename, src); !s.ok()) return s;
    return target()->LinkFile(src, target_name, opts, dbg);
  }

private:
  struct rule {
    io_op op;
    fault f;
    int remaining; // -1: probabilistic
    double p;
    std::string name_part;
    int skip; // operations to let through first
  };

  struct file_state {
    std::uint64_t size = 0;
    std::uint64_t synced = 0;
  };

  /// The fault for one operation, if any.
  rocksdb::IOStatus check(io_op op, const std::string& fname) {
    if (crashed() && op != io_op::read) return rocksdb::IOStatus::IOError("faulty_file_system: crashed");
    std::lock_guard g(mutex_);
    for (auto it = rules_.begin(); it != rules_.end(); ++it) {
      if (it->op != op || (!it->name_part.empty() && fname.find(it->name_part) == std::string::npos)) continue;
      bool hit = false;
      const auto f = it->f;
      if (it->remaining > 0 && it->skip > 0) {
        --it->skip;
      } else if (it->remaining > 0) {
        hit = true;
        if (--it->remaining == 0) rules_.erase(it);
      } else if (it->remaining < 0) {
        hit = std::bernoulli_distribution(it->p)(rng_);
      }
      if (!hit) continue;
      ++injected_;
      return status(op, f, fname);
    }
    return rocksdb::IOStatus::OK();
  }

  rocksdb::IOStatus status(io_op op, fault f, const std::string& fname) const {
    static constexpr const char* names[] = {"write", "sync", "read", "rename"};
    const std::string what = std::string("faulty_file_system: injected ") + names[static_cast<int>(op)] + " fault";
    if (f == fault::no_space) {
      auto s = rocksdb::IOStatus::NoSpace(what, fname);
      s.SetRetryable(false);
      return s;
    }
    return rocksdb::IOStatus::IOError(what, fname);
  }

  void wrote(const std::string& fname, std::uint64_t size) {
    std::lock_guard g(mutex_);
    files_[fname].size = size;
  }

  void synced(const std::string& fname, std::uint64_t size) {
    std::lock_guard g(mutex_);
    auto& f = files_[fname];
    f.size = std::max(f.size, size);
    f.synced = size;
  }

  /// Sleeps (outside the lock) for a sync of `name` while syncs are slowed.
  void slow_sync(const std::string& name) {
    std::chrono::milliseconds d{0};
    {
      std::lock_guard g(mutex_);
      if (sync_delay_.count() > 0 && name.find(sync_delay_part_) != std::string::npos) d = sync_delay_;
    }
    if (d.count() > 0) std::this_thread::sleep_for(d);
  }

  class writable final : public rocksdb::FSWritableFileOwnerWrapper {
  public:
    writable(std::unique_ptr<rocksdb::FSWritableFile> inner, faulty_file_system& fs, std::string name,
             std::uint64_t size)
        : rocksdb::FSWritableFileOwnerWrapper(std::move(inner)), fs_(fs), name_(std::move(name)), size_(size) {
      if (size_ > 0) fs_.synced(name_, size_);
      else fs_.wrote(name_, 0);
    }

    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* dbg) override {
      if (auto s = fs_.check(io_op::write, name_); !s.ok()) return s;
      auto s = target()->Append(data, o, dbg);
      if (s.ok()) fs_.wrote(name_, size_ += data.size());
      return s;
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo&, rocksdb::IODebugContext* dbg) override {
      return Append(data, o, dbg);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset, const rocksdb::IOOptions& o,
                                       rocksdb::IODebugContext* dbg) override {
      if (auto s = fs_.check(io_op::write, name_); !s.ok()) return s;
      auto s = target()->PositionedAppend(data, offset, o, dbg);
      if (s.ok()) fs_.wrote(name_, size_ = std::max(size_, offset + data.size()));
      return s;
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset, const rocksdb::IOOptions& o,
                                       const rocksdb::DataVerificationInfo&, rocksdb::IODebugContext* dbg) override {
      return PositionedAppend(data, offset, o, dbg);
    }
    rocksdb::IOStatus Truncate(uint64_t size, const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      if (auto s = fs_.check(io_op::write, name_); !s.ok()) return s;
      auto s = target()->Truncate(size, o, dbg);
      if (s.ok()) fs_.wrote(name_, size_ = size);
      return s;
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      if (auto s = fs_.check(io_op::sync, name_); !s.ok()) return s;
      fs_.slow_sync(name_);
      auto s = target()->Sync(o, dbg);
      if (s.ok()) fs_.synced(name_, size_);
      return s;
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      if (auto s = fs_.check(io_op::sync, name_); !s.ok()) return s;
      fs_.slow_sync(name_);
      auto s = target()->Fsync(o, dbg);
      if (s.ok()) fs_.synced(name_, size_);
      return s;
    }
    rocksdb::IOStatus RangeSync(uint64_t offset, uint64_t nbytes, const rocksdb::IOOptions& o,
                                rocksdb::IODebugContext* dbg) override {
      if (auto s = fs_.check(io_op::sync, name_); !s.ok()) return s;
      return target()->RangeSync(offset, nbytes, o, dbg);
    }
    rocksdb::IOStatus Close(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      // A file closed after a crash keeps what it has on disk; its unsynced
      // part is cut by `lose_unsynced`.
      return target()->Close(o, dbg);
    }

  private:
    faulty_file_system& fs_;
    std::string name_;
    std::uint64_t size_;
  };

  class random_access final : public rocksdb::FSRandomAccessFileOwnerWrapper {
  public:
    random_access(std::unique_ptr<rocksdb::FSRandomAccessFile> inner, faulty_file_system& fs, std::string name)
        : rocksdb::FSRandomAccessFileOwnerWrapper(std::move(inner)), fs_(fs), name_(std::move(name)) {}

    rocksdb::IOStatus Read(uint64_t offset, size_t n, const rocksdb::IOOptions& o, rocksdb::Slice* result,
                           char* scratch, rocksdb::IODebugContext* dbg) const override {
      if (auto s = fs_.check(io_op::read, name_); !s.ok()) return s;
      return target()->Read(offset, n, o, result, scratch, dbg);
    }
    rocksdb::IOStatus MultiRead(rocksdb::FSReadRequest* reqs, size_t num_reqs, const rocksdb::IOOptions& o,
                                rocksdb::IODebugContext* dbg) override {
      if (auto s = fs_.check(io_op::read, name_); !s.ok()) {
        for (size_t i = 0; i < num_reqs; ++i) reqs[i].status = s;
        return rocksdb::IOStatus::OK();
      }
      return target()->MultiRead(reqs, num_reqs, o, dbg);
    }

  private:
    faulty_file_system& fs_;
    std::string name_;
  };

  class sequential final : public rocksdb::FSSequentialFileOwnerWrapper {
  public:
    sequential(std::unique_ptr<rocksdb::FSSequentialFile> inner, faulty_file_system& fs, std::string name)
        : rocksdb::FSSequentialFileOwnerWrapper(std::move(inner)), fs_(fs), name_(std::move(name)) {}

    rocksdb::IOStatus Read(size_t n, const rocksdb::IOOptions& o, rocksdb::Slice* result, char* scratch,
                           rocksdb::IODebugContext* dbg) override {
      if (auto s = fs_.check(io_op::read, name_); !s.ok()) return s;
      return target()->Read(n, o, result, scratch, dbg);
    }

  private:
    faulty_file_system& fs_;
    std::string name_;
  };

  mutable std::mutex mutex_;
  std::vector<rule> rules_;
  std::chrono::milliseconds sync_delay_{0};
  std::string sync_delay_part_;
  std::map<std::string, file_state> files_; // written since the last crash
  std::mt19937_64 rng_;
  std::atomic<std::uint64_t> injected_{0};
  std::atomic<bool> crashed_{false};
};

} // namespace troupe::testing
