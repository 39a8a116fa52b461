#pragma once

// A store directory's lock: one store per directory in this process (by
// device and inode, whatever path reached it), and an open-file-description
// lock on `troupe-lock` that no other process can take while the store is
// open, and that nothing else this process opens or closes can release.
//
// RocksDB's own `LOCK` is a traditional fcntl lock: it belongs to the
// process, not to a descriptor, so closing any descriptor of that file in
// the process (a second store object reaching the same directory by a bind
// mount, an `ifstream` of it, the holder check below) drops it, and it does
// not keep out a second open in the same process. RocksDB also releases it
// at a reopen after a failed write. The lock here is held from before
// anything reads the store until the store object is destroyed.

#include <troupe/error.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/rocksdb/detail/status.hpp>

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace troupe::persistence::detail {

/// A failed system call on the store's own files: no space (or quota) is
/// `storage_full`.
inline errc io_errc(int e) noexcept { return e == ENOSPC || e == EDQUOT ? errc::storage_full : errc::storage_failure; }

/// A directory's identity: the same directory by any path (a bind mount, a
/// moved parent, a symlink) has one.
struct dir_identity {
  dev_t dev = 0;
  ino_t ino = 0;
  friend auto operator<=>(const dir_identity&, const dir_identity&) = default;
};

/// For tests only: called where a fork must not split the lock file's
/// descriptor from the registry (0: opening, 1: closing).
inline void (*store_lock_test_hook)(int where) = nullptr;

class store_lock {
public:
  static constexpr const char* file_name = "troupe-lock";

  /// Locks the store directory `path` (created first when `create`).
  /// Throws `store_locked` when this process has that directory open as a
  /// store already (by any path), or another process holds it.
  store_lock(const std::string& path, bool create) {
    if (create) {
      std::error_code ec;
      std::filesystem::create_directories(path, ec);
      if (ec) throw error(io_errc(ec.value()), "cannot create store " + path + ": " + ec.message());
    }
    dir_ = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_ < 0) fail("cannot open store " + path, errno);
    struct stat st {};
    if (::fstat(dir_, &st) != 0) fail("cannot open store " + path, errno);
    id_ = {st.st_dev, st.st_ino};
    // Opened and registered under the registry's lock, which a fork takes
    // too: a child forked in between would keep a description of the lock
    // file that no handler knows to drop, and with it the lock once taken.
    std::optional<std::string> other;
    int open_errno = 0;
    {
      std::lock_guard g(registry::mutex());
      registry::install_fork_handler();
      lock_ = ::openat(dir_, file_name, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (lock_ < 0) {
        open_errno = errno;
      } else {
        if (store_lock_test_hook) store_lock_test_hook(0);
        other = registry::add_locked(id_, path, dir_, lock_);
        registered_ = !other;
      }
    }
    if (lock_ < 0) fail("cannot open the lock file of store " + path, open_errno);
    if (other) {
      close_all();
      throw error(errc::store_locked, "cannot open store " + path + ": this process has it open already" +
                                          (*other == path ? std::string() : " (as " + *other + ": the same directory)"));
    }
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET; // the whole file; l_pid 0, as an OFD lock needs
    if (::fcntl(lock_, F_OFD_SETLK, &fl) != 0) {
      const int e = errno;
      if (e != EAGAIN && e != EACCES) fail("cannot lock store " + path, e);
      // No store of this process holds the directory (the registry said
      // so), so closing a descriptor of its LOCK here drops no lock of ours.
      const auto holder = lock_holder(path);
      close_all();
      throw error(errc::store_locked, "cannot open store " + path + ": locked by another process" +
                                          (holder ? " (pid " + std::to_string(holder) + ")" : std::string()));
    }
  }

  ~store_lock() { close_all(); }
  store_lock(const store_lock&) = delete;
  store_lock& operator=(const store_lock&) = delete;

private:
  [[noreturn]] void fail(const std::string& what, int e) {
    close_all();
    throw error(io_errc(e), what + ": " + std::strerror(e));
  }

  void close_all() noexcept {
    // Forgotten and closed under the registry's lock: a child forked in
    // between would keep the locked description.
    std::lock_guard g(registry::mutex());
    if (registered_) {
      registry::map().erase(id_);
      if (store_lock_test_hook) store_lock_test_hook(1);
    }
    registered_ = false;
    if (lock_ >= 0) ::close(lock_); // the description's last descriptor here: the lock goes
    if (dir_ >= 0) ::close(dir_);
    lock_ = dir_ = -1;
  }

  /// This process's stores by identity, with the path each was opened by
  /// (for the message) and its descriptors (for a forked child).
  struct registry {
    struct entry {
      std::string path;
      int dir, lock;
    };

    /// Under `mutex()`: registers the store, or returns the path of the one
    /// this process has open in that directory.
    static std::optional<std::string> add_locked(dir_identity id, const std::string& path, int dir, int lock) {
      auto [it, fresh] = map().try_emplace(id, entry{path, dir, lock});
      if (fresh) return std::nullopt;
      return it->second.path;
    }

    /// A child forked without exec shares the parent's lock descriptions:
    /// while it lives, the parent's lock would outlive the parent's store.
    /// Its copies are pointed at /dev/null (the numbers stay valid for the
    /// child's own close, and the description loses the child's
    /// reference), and it holds no store of its own.
    static void install_fork_handler() {
      static const bool installed = [] {
        ::pthread_atfork([] { mutex().lock(); }, [] { mutex().unlock(); },
                         [] {
                           const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
                           for (auto& [id, e] : map()) {
                             if (null >= 0) {
                               ::dup3(null, e.lock, O_CLOEXEC);
                               ::dup3(null, e.dir, O_CLOEXEC);
                             }
                           }
                           if (null >= 0) ::close(null);
                           map().clear();
                           mutex().unlock();
                         });
        return true;
      }();
      (void)installed;
    }

    static std::mutex& mutex() {
      static std::mutex m;
      return m;
    }
    static std::map<dir_identity, entry>& map() {
      static std::map<dir_identity, entry> m;
      return m;
    }
  };

  int dir_ = -1, lock_ = -1;
  dir_identity id_;
  bool registered_ = false;
};

} // namespace troupe::persistence::detail
