#pragma once

// The longer bodies of `rocksdb_engine` (troupe/rocksdb/detail/engine.hpp):
// opening the database, and the snapshot queries.

#include <troupe/persistence/detail/table_check.hpp>

namespace troupe::persistence::detail {

inline void rocksdb_engine::open() {
  namespace fs = std::filesystem;
  // The directory is ours (lock_); a process that keeps only RocksDB's LOCK
  // (an older troupe, RocksDB's own tools) is named here. Safe: no store of
  // this process holds this directory, so this check's close drops no lock.
  if (auto holder = detail::lock_holder(path_))
    throw error(errc::store_locked,
                "cannot open store " + path_ + ": locked by another process (pid " + std::to_string(holder) + ")");
  std::error_code fec;
  const bool exists = fs::exists(fs::path(path_) / "CURRENT", fec);
  detail::rocksdb_format format(path_);
  std::vector<std::string> existing;
  if (exists) {
    // Before anything reads the MANIFEST: RocksDB takes damage inside it for
    // its end, in salvage mode too (a salvage mends WALs only).
    if (auto d = detail::manifest_damage(path_); !d.empty())
      throw error(errc::corrupt_store,
                  "cannot open store " + path_ + ": its MANIFEST is damaged (" + d +
                      "); RocksDB would open the store as the records before the damage describe it, without the "
                      "column families and table files that follow. Nothing was changed; a salvage cannot mend it: "
                      "restore the store from a backup");
    if (auto d = detail::tables_damage(path_); !d.empty())
      throw error(errc::corrupt_store, "cannot open store " + path_ + ": a table file is damaged (" + d +
                                           "). Nothing was changed; a salvage cannot mend it: restore the store from "
                                           "a backup");
    auto st = rocksdb::DB::ListColumnFamilies(db_options(), path_, &existing);
    if (!st.ok()) fail_open(st, "cannot read its column families");
    format.refuse_newer(db_options(), existing);
  }
  // From here on the store is of a format this code reads.
  logger_ = std::make_shared<detail::store_logger>(path_ + "/LOG");
  std::vector<std::string> tables;
  for (auto& n : existing)
    if (!detail::rocksdb_layout::reserved(n)) tables.push_back(n);
  std::sort(tables.begin(), tables.end());
  // Every write of the WAL, read before RocksDB recovers (and may remove)
  // it, to name what the salvage drops.
  detail::wal_read wal;
  if (options_.salvage && exists) wal = detail::read_wal_files(path_);
  if (!options_.salvage && exists) refuse_damaged_wal();
  if (auto st = open_db(tables, true); !st.ok()) fail_open(st, "RocksDB refused it");
  if (options_.salvage && exists) {
    try {
      std::vector<rocksdb::ColumnFamilyHandle*> all(own_handles_);
      for (auto& t : layout_.tables)
        if (auto* h = t.load(std::memory_order_acquire)) all.push_back(h);
      salvaged_ = detail::salvage_store(*db_, layout_, all, logger_->damage(), wal,
                                        [this](const rocksdb::Status& st, const std::string& doing) {
                                          fail_open(st, doing);
                                        });
    } catch (...) {
      close_db();
      throw;
    }
  }
  try {
    opened_format_ = format.settle(*db_, meta_cf(), journal_cf(), snapshots_cf());
    migrated_ = format.migrated();
    settle_expiry_floor();
  } catch (...) {
    close_db();
    throw;
  }
  writer_.emplace(layout_, write_options(), options_.id_cache, failures_, [this] { return reopen(); }, background_,
                  expiries_.get());
}

inline void rocksdb_engine::settle_expiry_floor() {
  // A store without one (new, or of a version before it) has dropped
  // nothing under one: its compactions drop nothing until the writer has
  // written one (the first group after a table got an expiry).
  std::string v;
  auto st = db_->Get(rocksdb::ReadOptions{}, meta_cf(), detail::group_writer::floor_key, &v);
  if (st.ok() && v.size() == 8)
    expiries_->set_floor(static_cast<std::int64_t>(troupe::detail::get_be(v, 0, 8)));
  else if (!st.ok() && !st.IsNotFound())
    fail_open(st, "cannot read its expiry floor");
}

inline void rocksdb_engine::refuse_damaged_wal() const {
  for (auto& e : std::filesystem::directory_iterator(path_)) {
    if (e.path().extension() != ".log") continue;
    if (auto d = detail::damage_before_end(e.path().string()); !d.empty())
      throw error(errc::corrupt_store, "cannot open store " + path_ + ": its WAL is damaged (" + d +
                                           "); RocksDB would recover to the point before the damage and drop "
                                           "the rest without a report. Nothing was changed; "
                                           "rocksdb_options::salvage opens it without the damaged records");
  }
}

inline rocksdb::ColumnFamilyOptions rocksdb_engine::sized_levels() const {
  rocksdb::ColumnFamilyOptions cf;
  if (options_.write_buffers == 0) return cf;
  const std::uint64_t level1 = std::max<std::uint64_t>(options_.write_buffers / 2, 4u << 20);
  cf.max_bytes_for_level_base = level1;
  cf.target_file_size_base = level1 / 4;
  return cf;
}

inline rocksdb::ColumnFamilyOptions rocksdb_engine::own_options(std::string_view name) const {
  auto cf = sized_levels();
  cf.table_factory = table_factory_;
  if (name == "journal") cf.memtable_insert_with_hint_prefix_extractor = detail::id_prefix_extractor();
  return cf;
}

inline rocksdb::ColumnFamilyOptions rocksdb_engine::table_options(std::string_view name) const {
  auto cf = sized_levels();
  cf.table_factory = tables_factory_;
  // A file with many deletions is compacted soon, in a table of
  // short-lived records (one without an expiry).
  cf.table_properties_collector_factories.push_back(
      std::make_shared<detail::deletion_compaction_factory>(expiries_, std::string(name)));
  cf.memtable_insert_with_hint_prefix_extractor = detail::table_prefix_extractor();
  cf.compaction_filter_factory = std::make_shared<detail::expiry_filter_factory>(expiries_, std::string(name));
  return cf;
}

inline std::shared_ptr<rocksdb::TableFactory> rocksdb_engine::make_table_factory(std::shared_ptr<rocksdb::Cache> cache,
                                                                               bool partitioned) {
  rocksdb::BlockBasedTableOptions t;
  t.block_cache = std::move(cache);
  if (partitioned) {
    // The store's own column families (the journal above all): two-level
    // indexes and partitioned filters, so that only their top levels stay
    // in memory and the partitions go through the cache with the data (a
    // file's whole index or filter is not loaded for one read).
    t.index_type = rocksdb::BlockBasedTableOptions::IndexType::kTwoLevelIndexSearch;
    t.partition_filters = true;
    t.pin_top_level_index_and_filter = true;
  }
  // Tables: one index and one filter block per file, also through the
  // cache. `try_get` reads with `kBlockCacheTier`, and RocksDB 7.8 reads an
  // index partition that is not cached from the file whatever the read
  // tier (its partitioned index reader does not pass the tier on): with
  // partitions, a worker's `try_get` could wait for the disk.
  t.cache_index_and_filter_blocks = true;
  t.pin_l0_filter_and_index_blocks_in_cache = true;
  // A get of a key that is not there (a delivery's first arrival looking
  // for its dedup mark) mostly reads no block.
  t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  return std::shared_ptr<rocksdb::TableFactory>(rocksdb::NewBlockBasedTableFactory(t));
}

inline rocksdb::Status rocksdb_engine::open_db(const std::vector<std::string>& tables, bool first) {
  auto o = db_options();
  o.info_log = logger_;
  o.listeners.push_back(compactions_);
  o.listeners.push_back(background_);
  o.create_if_missing = options_.create_if_missing;
  o.create_missing_column_families = true;
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  for (auto* n : detail::rocksdb_layout::own_column_families) cfs.emplace_back(n, own_options(n));
  for (auto& n : tables) cfs.emplace_back(n, table_options(n));
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  auto st = rocksdb::DB::Open(o, path_, cfs, &handles, &db);
  if (!st.ok()) return st;
  constexpr std::size_t own = std::size(detail::rocksdb_layout::own_column_families);
  db_.reset(db);
  own_handles_.assign(handles.begin(), handles.begin() + own);
  layout_.db = db;
  layout_.journal = handles[1];
  layout_.snapshots = handles[2];
  layout_.meta = handles[3];
  for (std::size_t i = 0; i < tables.size(); ++i) {
    auto t = first ? registry_.add(tables[i]) : *registry_.find(tables[i]);
    layout_.tables[detail::table_registry::slot_of(t)].store(handles[own + i], std::memory_order_release);
    if (first) table_count_.fetch_add(1, std::memory_order_release);
  }
  return st;
}

inline std::error_code rocksdb_engine::save_snapshot(std::string_view pid, const snapshot_record& s) {
  if (!detail::valid_pid(pid) || !detail::valid_metadata(s.metadata)) return troupe::errc::invalid_argument;
  auto key = detail::seq_key(detail::id_prefix(pid), s.seq);
  std::string value;
  if (s.metadata.written_ms == 0) {
    auto stamped = s;
    stamped.metadata.written_ms = troupe::detail::now_ms();
    value = detail::encode_snapshot(stamped);
  } else {
    value = detail::encode_snapshot(s);
  }
  return writer_->run(std::string(pid), [this, key, value = std::move(value)](rocksdb::WriteBatch& b, sequence_nr) {
    b.Put(snapshots_cf(), key, value);
    return std::error_code{};
  });
}

inline std::error_code rocksdb_engine::load_snapshot(std::string_view pid, const snapshot_criteria& c,
                                                   std::optional<snapshot_record>& out) {
  out.reset();
  if (!detail::valid_pid(pid)) return troupe::errc::invalid_argument;
  const auto prefix = detail::id_prefix(pid);
  auto r = read_db();
  if (!r.db) return r.ec;
  const rocksdb::Slice lower(prefix); // not read past into the IDs before
  rocksdb::ReadOptions ro;
  ro.iterate_lower_bound = &lower;
  std::unique_ptr<rocksdb::Iterator> it(r.db->NewIterator(ro, snapshots_cf()));
  snapshot_record s;
  for (it->SeekForPrev(detail::seq_key(prefix, c.max_seq)); it->Valid(); it->Prev()) {
    auto key = it->key().ToStringView();
    if (!detail::has_prefix(key, prefix)) break;
    auto seq = detail::seq_of_key(key);
    if (seq < c.min_seq) break;
    if (!detail::decode_snapshot(it->value().ToStringView(), seq, s)) {
      failures_.set("snapshot " + std::to_string(seq) + " of " + std::string(pid) + " in " + path_ +
                    " does not decode (bad checksum or layout)");
      out.emplace().seq = seq;
      return errc::corrupt_record;
    }
    if (c.matches(s)) {
      out = std::move(s);
      return {};
    }
  }
  if (!it->status().ok()) return read_failed(it->status(), "the snapshots of " + std::string(pid));
  return {};
}

inline std::error_code rocksdb_engine::delete_snapshots(std::string_view pid, const snapshot_criteria& c) {
  if (!detail::valid_pid(pid)) return troupe::errc::invalid_argument;
  const auto prefix = detail::id_prefix(pid);
  auto r = read_db();
  if (!r.db) return r.ec;
  const auto end = detail::prefix_end(prefix); // not read past into the IDs after
  const rocksdb::Slice upper(end);
  rocksdb::ReadOptions ro;
  if (!end.empty()) ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(r.db->NewIterator(ro, snapshots_cf()));
  std::vector<std::string> doomed;
  snapshot_record s;
  for (it->Seek(detail::seq_key(prefix, c.min_seq)); it->Valid(); it->Next()) {
    auto key = it->key().ToStringView();
    if (!detail::has_prefix(key, prefix)) break;
    auto seq = detail::seq_of_key(key);
    if (seq > c.max_seq) break;
    if (!detail::decode_snapshot(it->value().ToStringView(), seq, s) || c.matches(s)) doomed.emplace_back(key);
  }
  if (!it->status().ok()) return read_failed(it->status(), "the snapshots of " + std::string(pid));
  it.reset();
  r.lock.unlock(); // the writer may need the database alone (a reopen)
  if (doomed.empty()) return {};
  return writer_->run(std::string(pid), [this, doomed = std::move(doomed)](rocksdb::WriteBatch& b, sequence_nr) {
    for (auto& key : doomed) b.Delete(snapshots_cf(), key);
    return std::error_code{};
  });
}

} // namespace troupe::persistence::detail
