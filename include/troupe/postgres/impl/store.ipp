#pragma once

// The definitions of `postgres_store` (troupe/postgres/store.hpp): each
// forwards to the engine. Included by that header (header-only) or by
// <troupe/postgres/impl/src.hpp> (TROUPE_SEPARATE_COMPILATION).

#include <troupe/postgres/store.hpp>
#include <troupe/postgres/detail/engine.hpp>

namespace troupe::persistence {

static_assert(postgres_store::schema_version == detail::postgres_engine::schema_version);

TROUPE_DECL postgres_store::postgres_store(postgres_options o)
    : engine_(std::make_unique<detail::postgres_engine>(std::move(o))) {}

TROUPE_DECL postgres_store::~postgres_store() = default;

TROUPE_DECL void postgres_store::drop_schema(const std::string& conninfo, const std::string& schema) {
  detail::postgres_engine::drop_schema(conninfo, schema);
}

TROUPE_DECL detail::live_ids& postgres_store::live_ids() noexcept { return engine_->live_ids(); }
TROUPE_DECL const std::string& postgres_store::owner() const noexcept { return engine_->owner(); }

TROUPE_DECL std::error_code postgres_store::claim(std::string_view pid) { return engine_->claim(pid); }
TROUPE_DECL std::int64_t postgres_store::epoch(std::string_view pid) const { return engine_->epoch(pid); }

TROUPE_DECL table postgres_store::open_table(std::string_view name) { return engine_->open_table(name); }
TROUPE_DECL std::optional<table> postgres_store::find_table(std::string_view name) {
  return engine_->find_table(name);
}
TROUPE_DECL void postgres_store::set_expiry(table t, expiry_fn f) { engine_->set_expiry(t, std::move(f)); }
TROUPE_DECL std::int64_t postgres_store::expired_through() const noexcept { return engine_->expired_through(); }
TROUPE_DECL std::error_code postgres_store::drop_expired(table t) { return engine_->drop_expired(t); }

TROUPE_DECL void postgres_store::submit(std::string pid, std::vector<event_record> events,
                                        std::vector<table_write> tables,
                                        troupe::detail::unique_function<void(std::error_code)> done) {
  engine_->submit(std::move(pid), std::move(events), std::move(tables), std::move(done));
}
TROUPE_DECL std::error_code postgres_store::write(std::string_view pid, const std::vector<event_record>& events,
                                                  const std::vector<table_write>& tables) {
  return engine_->write(pid, events, tables);
}

TROUPE_DECL std::error_code postgres_store::get(table t, std::string_view key, std::optional<std::string>& out) {
  return engine_->get(t, key, out);
}
TROUPE_DECL std::error_code postgres_store::scan_keys(
    table t, std::string_view prefix, std::string_view from,
    troupe::detail::function_ref<bool(std::string_view, std::string_view)> f) {
  return engine_->scan_from(t, prefix, from, f);
}
TROUPE_DECL std::error_code postgres_store::replay_events(std::string_view pid, sequence_nr from, sequence_nr to,
                                                          std::uint64_t max,
                                                          troupe::detail::function_ref<void(event_record&)> f) {
  return engine_->replay(pid, from, to, max, f);
}

TROUPE_DECL sequence_nr postgres_store::highest_sequence_nr(std::string_view pid) {
  return engine_->highest_sequence_nr(pid);
}
TROUPE_DECL std::error_code postgres_store::delete_up_to(std::string_view pid, sequence_nr to) {
  return engine_->delete_up_to(pid, to);
}

TROUPE_DECL std::error_code postgres_store::save_snapshot(std::string_view pid, const snapshot_record& s) {
  return engine_->save_snapshot(pid, s);
}
TROUPE_DECL std::error_code postgres_store::load_snapshot(std::string_view pid, const snapshot_criteria& c,
                                                          std::optional<snapshot_record>& out) {
  return engine_->load_snapshot(pid, c, out);
}
TROUPE_DECL std::error_code postgres_store::delete_snapshot(std::string_view pid, sequence_nr seq) {
  return engine_->delete_snapshot(pid, seq);
}
TROUPE_DECL std::error_code postgres_store::delete_snapshots(std::string_view pid, const snapshot_criteria& c) {
  return engine_->delete_snapshots(pid, c);
}

TROUPE_DECL std::string postgres_store::last_failure() const { return engine_->last_failure(); }
TROUPE_DECL postgres_store::writer_counts postgres_store::counts() const { return engine_->counts(); }

TROUPE_DECL void postgres_store::report_metrics(metrics_snapshot& s) const {
  const metric_labels engine{{"engine", "postgres"}};
  const auto c = counts();
  auto d = [](auto v) { return static_cast<double>(v); };
  s.add_counter("troupe_store_group_commits_total",
                "Group commits: one store write (and, synced, one WAL sync) for every write queued meanwhile",
                d(c.commits), engine);
  s.add_counter("troupe_store_writes_total", "Writes the group commits carried", d(c.writes), engine);
  s.add_counter("troupe_store_commits_resolved_total", "Commits whose answer was lost and whose outcome was asked",
                d(c.resolved), engine);
  s.add_counter("troupe_store_deadlock_retries_total", "Groups rolled back as a deadlock's victim and run again",
                d(c.deadlock_retries), engine);
}

} // namespace troupe::persistence
