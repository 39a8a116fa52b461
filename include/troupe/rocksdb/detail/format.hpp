#pragma once

// The on-disk format of a RocksDB store: which version a store has (read
// before RocksDB may write anything, so that a newer store is refused
// untouched), and the migration of an older store's records to the
// current format when it is opened.

#include <troupe/error.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/persistence/detail/codec.hpp>
#include <troupe/rocksdb/detail/status.hpp>
#include <troupe/detail/bytes.hpp>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace troupe::persistence::detail {

/// The format versions of a store and what opening one of them takes.
///
/// - 1: events and snapshots without metadata or a state version.
/// - 2: events and snapshots with their metadata (write time, entries);
///   snapshots with the state's version; checksums seeded with the format.
///
/// The version is in `meta/"format"` and in a file `troupe-format`; while
/// `meta/"migrating"` exists, records of an older format may remain. A
/// release that raises the version writes the file first: the file is
/// never behind `meta`, and a store whose file says a newer version is
/// refused before anything can be written.
class rocksdb_format {
public:
  /// The format this code writes; a store of a higher one is refused.
  static constexpr std::uint32_t current = 2;
  /// The file holding the version, next to RocksDB's files.
  static constexpr const char* file_name = "troupe-format";

  explicit rocksdb_format(std::string path) : path_(std::move(path)) {}

  /// Before RocksDB opens the store for writing: throws
  /// `store_format_too_new` for a newer store (left unchanged), and
  /// `corrupt_store` when its version cannot be read.
  void refuse_newer(const rocksdb::DBOptions& o, const std::vector<std::string>& column_families) const {
    if (read_file()) return;
    read_read_only(o, column_families);
  }

  /// Once RocksDB has opened the store: a new store gets the current
  /// format; an older one is migrated (records rewritten in the current
  /// format, resumable after a crash part-way). Returns the version found
  /// (the current one for a new store).
  std::uint32_t settle(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* meta, rocksdb::ColumnFamilyHandle* journal,
                       rocksdb::ColumnFamilyHandle* snapshots) const {
    std::string v;
    auto st = db.Get(rocksdb::ReadOptions{}, meta, "format", &v);
    std::uint32_t found = current;
    if (st.IsNotFound()) {
      write_meta(db, meta, false);
    } else if (!st.ok()) {
      fail(st, "cannot read its format version");
    } else if (v.size() != 4) {
      throw error(errc::corrupt_store, "cannot open store " + path_ + ": its format version is unreadable");
    } else {
      found = static_cast<std::uint32_t>(troupe::detail::get_be(v, 0, 4));
      refuse_if_newer(found);
    }
    std::string flag;
    auto mst = db.Get(rocksdb::ReadOptions{}, meta, "migrating", &flag);
    if (!mst.ok() && !mst.IsNotFound()) fail(mst, "cannot read its format version");
    const bool migrating = mst.ok();
    if (found < current || migrating) {
      // The new version first, in the file that every release reads before
      // anything else (an older troupe then refuses the store untouched
      // rather than misread what is migrated), then in `meta` with the flag
      // that says the migration is not done; the flag goes once every
      // record is. A crash between the two leaves the file ahead: the next
      // open migrates.
      write_file();
      if (found < current) write_meta(db, meta, true);
      migrate(db, journal, snapshots);
      rocksdb::WriteOptions wo;
      wo.sync = true;
      if (auto d = db.Delete(wo, meta, "migrating"); !d.ok()) fail(d, "cannot finish its migration");
    } else {
      write_file();
    }
    return found;
  }

  /// Records rewritten by the last `settle` (for tests and the log).
  std::uint64_t migrated() const noexcept { return migrated_; }

private:
  [[noreturn]] void fail(const rocksdb::Status& st, const std::string& doing) const {
    throw error(status_code(st, errc::corrupt_store), "cannot open store " + path_ + ": " + doing + ": " + st.ToString());
  }

  void refuse_if_newer(std::uint64_t found) const {
    if (found > current)
      throw error(errc::store_format_too_new, "store " + path_ + " has format version " + std::to_string(found) +
                                                  "; this troupe reads up to " + std::to_string(current) +
                                                  " (the store was left unchanged)");
  }

  /// The format file's version, if the store has the file; throws for a
  /// newer one, or an unreadable file.
  std::optional<std::uint64_t> read_file() const {
    const auto file = std::filesystem::path(path_) / file_name;
    std::error_code ec;
    if (!std::filesystem::exists(file, ec)) return std::nullopt;
    std::ifstream in(file);
    std::uint64_t v = 0;
    if (!(in >> v))
      throw error(errc::corrupt_store, "cannot open store " + path_ + ": " + file.string() + " holds no format version");
    refuse_if_newer(v);
    return v;
  }

  /// A store written before the format file existed: its version from
  /// `meta`, read without writing anything.
  void read_read_only(rocksdb::DBOptions o, const std::vector<std::string>& existing) const {
    if (std::find(existing.begin(), existing.end(), "meta") == existing.end()) return; // not a troupe store yet
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs{{"default", {}}, {"meta", {}}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    auto st = rocksdb::DB::OpenForReadOnly(o, path_, cfs, &handles, &raw);
    if (!st.ok()) fail(st, "cannot read its format version");
    std::unique_ptr<rocksdb::DB> db(raw);
    std::string v;
    st = db->Get(rocksdb::ReadOptions{}, handles[1], "format", &v);
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
    if (st.IsNotFound()) return;
    if (!st.ok()) fail(st, "cannot read its format version");
    if (v.size() != 4) throw error(errc::corrupt_store, "cannot open store " + path_ + ": its format version is unreadable");
    refuse_if_newer(troupe::detail::get_be(v, 0, 4));
  }

  void write_meta(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* meta, bool migrating) const {
    std::string f;
    troupe::detail::put_u32(f, current);
    rocksdb::WriteBatch b;
    b.Put(meta, "format", f);
    if (migrating) b.Put(meta, "migrating", "1");
    rocksdb::WriteOptions wo;
    wo.sync = true;
    if (auto st = db.Write(wo, &b); !st.ok()) fail(st, "cannot write its format version");
  }

  /// The format file says `current` (replaced atomically when it says
  /// something else).
  void write_file() const {
    const auto file = std::filesystem::path(path_) / file_name;
    std::error_code ec;
    if (std::filesystem::exists(file, ec)) {
      std::ifstream in(file);
      std::uint64_t v = 0;
      if (in >> v && v == current) return;
    }
    const auto tmp = file.string() + ".tmp";
    {
      // With write(2), not a stream: its errno says whether the disk is full.
      const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) fail_io("cannot write " + tmp, errno);
      const std::string text = std::to_string(current) + "\n";
      const auto n = ::write(fd, text.data(), text.size());
      const int e = n < 0 ? errno : ENOSPC; // a short write to a regular file: no space
      if (n != static_cast<ssize_t>(text.size()) || ::fsync(fd) != 0) {
        const int err = n == static_cast<ssize_t>(text.size()) ? errno : e;
        ::close(fd);
        fail_io("cannot write " + tmp, err);
      }
      ::close(fd);
    }
    std::filesystem::rename(tmp, file, ec);
    if (ec) fail_io("cannot write " + file.string(), ec.value());
    sync_path(path_);
  }

  [[noreturn]] static void fail_io(const std::string& what, int e) {
    throw error(e == ENOSPC || e == EDQUOT ? errc::storage_full : errc::storage_failure,
                what + ": " + std::strerror(e));
  }

  static void sync_path(const std::string& p) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    (void)::fsync(fd);
    ::close(fd);
  }

  /// Rewrites every format-1 event and snapshot in format 2 (no metadata,
  /// state version 1), in batches; a record of format 2 already (an earlier
  /// migration's, or a salvage's) is left as it is, and so is one that
  /// decodes in neither (reads report it, as they would have).
  void migrate(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* journal, rocksdb::ColumnFamilyHandle* snapshots) const {
    migrated_ = 0;
    rewrite(db, journal, [](std::string_view key, std::string_view v, std::string& out) {
      if (key.size() < 8) return false;
      event_record e;
      const auto seq = seq_of_key(key);
      if (decode_event(v, seq, e) || !decode_event_v1(v, seq, e)) return false;
      out = encode_event(e);
      return true;
    });
    rewrite(db, snapshots, [](std::string_view key, std::string_view v, std::string& out) {
      if (key.size() < 8) return false;
      snapshot_record s;
      const auto seq = seq_of_key(key);
      if (decode_snapshot(v, seq, s) || !decode_snapshot_v1(v, seq, s)) return false;
      out = encode_snapshot(s);
      return true;
    });
  }

  template <class Convert>
  void rewrite(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* cf, Convert convert) const {
    constexpr std::size_t batch_bytes = 4 << 20;
    rocksdb::WriteOptions wo;
    wo.sync = true;
    rocksdb::WriteBatch b;
    std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(rocksdb::ReadOptions{}, cf));
    std::string out;
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (!convert(it->key().ToStringView(), it->value().ToStringView(), out)) continue;
      b.Put(cf, it->key(), out);
      ++migrated_;
      if (b.GetDataSize() >= batch_bytes) {
        if (auto st = db.Write(wo, &b); !st.ok()) fail(st, "cannot migrate it to format " + std::to_string(current));
        b.Clear();
      }
    }
    if (!it->status().ok()) fail(it->status(), "cannot read it to migrate it");
    if (b.Count() > 0)
      if (auto st = db.Write(wo, &b); !st.ok()) fail(st, "cannot migrate it to format " + std::to_string(current));
  }

  std::string path_;
  mutable std::uint64_t migrated_ = 0;
};

} // namespace troupe::persistence::detail
