#pragma once

// What a RocksDB status means to troupe (from its code and subcode, never
// from its text), the store's info log (RocksDB's own logger writes through
// the store's file system and can fail hard when the disk is full), the
// latest failure's description, and which process holds a store's lock.

#include <troupe/persistence/error.hpp>

#include <rocksdb/env.h>
#include <rocksdb/listener.h>
#include <rocksdb/status.h>

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <atomic>
#include <string>
#include <system_error>
#include <vector>

namespace troupe::persistence::detail {

/// The code of a failed status: `storage_full` for no space, `corrupt` (a
/// record's or the store's) for a corruption, `storage_failure` otherwise.
inline std::error_code status_code(const rocksdb::Status& st, errc corrupt = errc::corrupt_record) noexcept {
  if (st.ok()) return {};
  if (st.IsNoSpace() || (st.IsIOError() && st.subcode() == rocksdb::Status::kSpaceLimit)) return errc::storage_full;
  if (st.IsCorruption()) return corrupt;
  return errc::storage_failure;
}

/// Whether RocksDB's standing background error is a lack of space (set on
/// its background threads; kept across reopens).
class background_errors final : public rocksdb::EventListener {
public:
  void OnBackgroundError(rocksdb::BackgroundErrorReason, rocksdb::Status* e) override {
    if (e && !e->ok()) no_space_.store(status_code(*e) == errc::storage_full, std::memory_order_relaxed);
  }
  void OnErrorRecoveryEnd(const rocksdb::BackgroundErrorRecoveryInfo& i) override {
    if (i.new_bg_error.ok()) no_space_.store(false, std::memory_order_relaxed);
  }
  bool no_space() const noexcept { return no_space_.load(std::memory_order_relaxed); }
  void reset() noexcept { no_space_.store(false, std::memory_order_relaxed); }

private:
  std::atomic<bool> no_space_{false};
};

/// A failed write's or reopen's code: `storage_full` for any lack of space,
/// also when RocksDB reports it wrapped (a write stopped behind a
/// background error of no space comes back as `Incomplete`; an `IOError`
/// without subcode while such an error stands).
inline std::error_code write_code(const rocksdb::Status& st, bool background_no_space) noexcept {
  if (st.ok()) return {};
  if (status_code(st) == errc::storage_full) return errc::storage_full;
  if (background_no_space && (st.IsIncomplete() || (st.IsIOError() && st.subcode() == rocksdb::Status::kNone)))
    return errc::storage_full;
  return errc::storage_failure;
}

/// The description of the latest failure, for the message of an error
/// whose code alone was passed on (a write's callback has only the code).
class failure_note {
public:
  void set(std::string what) {
    std::lock_guard g(mutex_);
    what_ = std::move(what);
  }
  std::string get() const {
    std::lock_guard g(mutex_);
    return what_;
  }

private:
  mutable std::mutex mutex_;
  std::string what_;
};

/// The store's `LOG`: RocksDB's messages, written with plain stdio whose
/// failures (a full disk) are ignored. It also keeps what RocksDB reports
/// of damage found while recovering (the WAL records it dropped or
/// refused), for the error or the salvage report.
class store_logger final : public rocksdb::Logger {
public:
  /// Appends to `path`; a log over 4 MiB is moved to `path.old` first,
  /// and while running, the log is started again (its older part moved to
  /// `path.old`) whenever it reaches 4 MiB: a store that reopens itself
  /// again and again on a full disk does not fill it with its own log.
  explicit store_logger(const std::string& path) : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL), path_(path) {
    std::error_code ec;
    if (std::filesystem::file_size(path, ec) > limit && !ec) std::filesystem::rename(path, path + ".old", ec);
    file_ = std::fopen(path.c_str(), "a");
    if (file_) written_ = static_cast<std::size_t>(std::ftell(file_));
  }
  ~store_logger() override {
    if (file_) std::fclose(file_);
  }

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char text[2048];
    va_list copy;
    va_copy(copy, ap);
    const int n = std::vsnprintf(text, sizeof text, format, copy);
    va_end(copy);
    if (n < 0) return;
    const std::string line(text, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof text - 1));
    std::lock_guard g(mutex_);
    if ((line.find("dropping") != std::string::npos || line.find("orruption") != std::string::npos) &&
        damage_.size() < 64)
      damage_.push_back(line);
    if (!file_) return;
    const auto now = std::chrono::system_clock::now();
    const auto t = std::chrono::system_clock::to_time_t(now);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y/%m/%d-%H:%M:%S", &tm);
    const int w = std::fprintf(file_, "%s %s\n", stamp, line.c_str()); // errors ignored: a full disk must not stop the store
    std::fflush(file_);
    if (w > 0) written_ += static_cast<std::size_t>(w);
    if (written_ >= limit) { // start again; the older part replaces the last one
      std::fclose(file_);
      std::error_code ec;
      std::filesystem::rename(path_, path_ + ".old", ec);
      file_ = std::fopen(path_.c_str(), "w");
      written_ = 0;
    }
  }

  /// What RocksDB reported of damage while recovering (file, bytes dropped,
  /// reason), in order.
  std::vector<std::string> damage() const {
    std::lock_guard g(mutex_);
    return damage_;
  }

private:
  static constexpr std::size_t limit = 4u << 20;
  const std::string path_;
  mutable std::mutex mutex_;
  std::FILE* file_ = nullptr;
  std::size_t written_ = 0;
  std::vector<std::string> damage_;
};

/// The process holding the lock of the store at `dir` (RocksDB's `LOCK`
/// file, an fcntl lock), or 0 if none does. Only while this process holds
/// no store of `dir`: closing its descriptor drops this process's fcntl
/// locks on that file (see store_lock.hpp).
inline pid_t lock_holder(const std::string& dir) {
  const auto lock = dir + "/LOCK";
  const int fd = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  const bool held = ::fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
  ::close(fd);
  return held ? fl.l_pid : 0;
}

} // namespace troupe::persistence::detail
