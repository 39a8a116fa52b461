#pragma once

// The definitions of `rocksdb_store` (troupe/rocksdb/store.hpp): each
// forwards to the engine. Included by that header (header-only) or by
// <troupe/rocksdb/impl/src.hpp> (TROUPE_SEPARATE_COMPILATION).

#include <troupe/rocksdb/store.hpp>
#include <troupe/rocksdb/detail/engine.hpp>

namespace troupe::persistence {

static_assert(rocksdb_store::format_version == detail::rocksdb_format::current);

TROUPE_DECL rocksdb_store::rocksdb_store(const std::string& path, rocksdb_options options)
    : engine_(std::make_unique<detail::rocksdb_engine>(path, std::move(options))) {}

TROUPE_DECL rocksdb_store::~rocksdb_store() = default;

TROUPE_DECL detail::live_ids& rocksdb_store::live_ids() noexcept { return engine_->live_ids(); }
TROUPE_DECL const std::string& rocksdb_store::path() const noexcept { return engine_->path(); }
TROUPE_DECL std::string rocksdb_store::last_failure() const { return engine_->last_failure(); }
TROUPE_DECL const std::vector<std::string>& rocksdb_store::salvaged() const noexcept { return engine_->salvaged(); }
TROUPE_DECL std::uint32_t rocksdb_store::opened_format() const noexcept { return engine_->opened_format(); }
TROUPE_DECL std::uint64_t rocksdb_store::migrated_records() const noexcept { return engine_->migrated_records(); }

TROUPE_DECL rocksdb::DB& rocksdb_store::db() noexcept { return engine_->db(); }
TROUPE_DECL rocksdb::ColumnFamilyHandle* rocksdb_store::journal_cf() const noexcept { return engine_->journal_cf(); }
TROUPE_DECL rocksdb::ColumnFamilyHandle* rocksdb_store::snapshots_cf() const noexcept {
  return engine_->snapshots_cf();
}
TROUPE_DECL rocksdb::ColumnFamilyHandle* rocksdb_store::meta_cf() const noexcept { return engine_->meta_cf(); }
TROUPE_DECL rocksdb::ColumnFamilyHandle* rocksdb_store::column_family(table t) const noexcept {
  return engine_->column_family(t);
}

TROUPE_DECL table rocksdb_store::open_table(std::string_view name) { return engine_->open_table(name); }
TROUPE_DECL std::optional<table> rocksdb_store::find_table(std::string_view name) { return engine_->find_table(name); }
TROUPE_DECL void rocksdb_store::set_expiry(table t, expiry_fn f) { engine_->set_expiry(t, std::move(f)); }
TROUPE_DECL std::error_code rocksdb_store::drop_expired(table t) { return engine_->drop_expired(t); }
TROUPE_DECL std::int64_t rocksdb_store::expired_through() const noexcept { return engine_->expired_through(); }

TROUPE_DECL void rocksdb_store::submit(std::string pid, std::vector<event_record> events,
                                       std::vector<table_write> tables,
                                       troupe::detail::unique_function<void(std::error_code)> done) {
  engine_->submit(std::move(pid), std::move(events), std::move(tables), std::move(done));
}
TROUPE_DECL void rocksdb_store::write_later(std::vector<table_write> tables) { engine_->write_later(std::move(tables)); }
TROUPE_DECL std::error_code rocksdb_store::flush_writes() { return engine_->flush_writes(); }
TROUPE_DECL std::error_code rocksdb_store::write(std::string_view pid, const std::vector<event_record>& events,
                                                 const std::vector<table_write>& tables) {
  return engine_->write(pid, events, tables);
}

TROUPE_DECL std::error_code rocksdb_store::get(table t, std::string_view key, std::optional<std::string>& out) {
  return engine_->get(t, key, out);
}
TROUPE_DECL bool rocksdb_store::try_get(table t, std::string_view key, std::optional<std::string>& out) {
  return engine_->try_get(t, key, out);
}
TROUPE_DECL std::error_code rocksdb_store::scan_keys(
    table t, std::string_view prefix, std::string_view from,
    troupe::detail::function_ref<bool(std::string_view, std::string_view)> f) {
  return engine_->scan_from(t, prefix, from, f);
}
TROUPE_DECL std::error_code rocksdb_store::replay_events(std::string_view pid, sequence_nr from, sequence_nr to,
                                                         std::uint64_t max,
                                                         troupe::detail::function_ref<void(event_record&)> f) {
  return engine_->replay(pid, from, to, max, f);
}

TROUPE_DECL sequence_nr rocksdb_store::highest_sequence_nr(std::string_view pid) {
  return engine_->highest_sequence_nr(pid);
}
TROUPE_DECL std::error_code rocksdb_store::delete_up_to(std::string_view pid, sequence_nr to) {
  return engine_->delete_up_to(pid, to);
}

TROUPE_DECL std::error_code rocksdb_store::save_snapshot(std::string_view pid, const snapshot_record& s) {
  return engine_->save_snapshot(pid, s);
}
TROUPE_DECL std::error_code rocksdb_store::load_snapshot(std::string_view pid, const snapshot_criteria& c,
                                                         std::optional<snapshot_record>& out) {
  return engine_->load_snapshot(pid, c, out);
}
TROUPE_DECL std::error_code rocksdb_store::delete_snapshot(std::string_view pid, sequence_nr seq) {
  return engine_->delete_snapshot(pid, seq);
}
TROUPE_DECL std::error_code rocksdb_store::delete_snapshots(std::string_view pid, const snapshot_criteria& c) {
  return engine_->delete_snapshots(pid, c);
}

TROUPE_DECL void rocksdb_store::report_metrics(metrics_snapshot& s) const {
  const metric_labels engine{{"engine", "rocksdb"}};
  auto d = [](auto v) { return static_cast<double>(v); };
  s.add_counter("troupe_store_group_commits_total",
                "Group commits: one store write (and, synced, one WAL sync) for every write queued meanwhile",
                d(batches_written()), engine);
  s.add_counter("troupe_store_events_written_total", "Events written by the group commits", d(events_written()),
                engine);
  s.add_counter("troupe_store_records_written_total",
                "Records (events, table puts and deletes) written by the group commits", d(records_written()), engine);
  const auto t = writer_times();
  s.add_counter("troupe_store_writer_busy_seconds_total", "The store writer thread's time on groups",
                std::chrono::duration<double>(t.busy).count(), engine);
  const auto c = compactions();
  s.add_counter("troupe_store_compactions_total", "The engine's compactions", d(c.compactions), engine);
  s.add_counter("troupe_store_compaction_bytes_written_total", "Bytes the engine's compactions wrote",
                d(c.bytes_written), engine);
}

TROUPE_DECL std::uint64_t rocksdb_store::batches_written() const noexcept { return engine_->batches_written(); }
TROUPE_DECL std::uint64_t rocksdb_store::events_written() const noexcept { return engine_->events_written(); }
TROUPE_DECL std::uint64_t rocksdb_store::records_written() const noexcept { return engine_->records_written(); }
TROUPE_DECL std::size_t rocksdb_store::cached_ids() const noexcept { return engine_->cached_ids(); }
TROUPE_DECL persistence::writer_times rocksdb_store::writer_times() const noexcept { return engine_->writer_times(); }
TROUPE_DECL compaction_totals rocksdb_store::compactions() const noexcept { return engine_->compactions(); }

} // namespace troupe::persistence
