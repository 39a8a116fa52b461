#pragma once

// The salvage of a RocksDB store whose WAL is damaged (`rocksdb_options::
// salvage`): the WAL read before RocksDB recovers it, then, once RocksDB has
// opened the store at the last consistent point, what was dropped named and
// the dropped numbers kept.

#include <troupe/persistence/records.hpp>
#include <troupe/persistence/detail/codec.hpp>
#include <troupe/rocksdb/detail/layout.hpp>
#include <troupe/rocksdb/detail/wal_reader.hpp>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::persistence::detail {

/// The `meta` key of the last salvage's report (its lines, each ending in a
/// newline).
inline constexpr std::string_view salvage_report_key = "salvaged";

/// The writes of the WAL files in `dir`, oldest first, and the first
/// damage among them that RocksDB may not report (`damage_before_end`,
/// judged file by file: an older WAL that a crash tore, followed by the
/// one written after the restart, is no damage).
struct wal_read {
  std::vector<wal_write> writes;
  std::string damage; // empty if none
};
inline wal_read read_wal_files(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  for (auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".log") files.push_back(e.path());
  // By number (their names are zero-padded to six digits, then grow).
  auto number = [](const std::filesystem::path& f) {
    try {
      return std::stoull(f.stem().string());
    } catch (const std::exception&) {
      return 0ull;
    }
  };
  std::sort(files.begin(), files.end(), [&](auto& a, auto& b) { return number(a) < number(b); });
  wal_read out;
  for (auto& f : files) {
    auto w = read_wal(f.string());
    if (auto d = damage_in(w)) {
      if (out.damage.empty()) out.damage = describe_damage(f.string(), w, *d);
      // RocksDB reads none of this file from its first damaged write on.
      auto first = std::find_if(w.begin(), w.end(), [](const wal_write& x) { return x.damaged || x.repaired; });
      for (; first != w.end(); ++first) first->after_damage = true;
    }
    out.writes.insert(out.writes.end(), std::make_move_iterator(w.begin()), std::make_move_iterator(w.end()));
  }
  return out;
}

/// After a point-in-time open of a damaged store (`all`: every column
/// family's handle; `damage`: RocksDB's reports of what it dropped; `wal`:
/// the WAL's writes as read before the open): leaves an `events_lost`
/// record at the last dropped number of each ID (so that no number that
/// may have been acknowledged is handed out again, and recovery passes over
/// them), flushes everything (the damaged WAL is gone, the next open is an
/// ordinary one), and returns what it found and dropped, a line each.
/// `fail(status, doing)` throws.
inline std::vector<std::string> salvage_store(
    rocksdb::DB& db, const rocksdb_layout& layout, const std::vector<rocksdb::ColumnFamilyHandle*>& all,
    const std::vector<std::string>& damage, const wal_read& wal,
    const std::function<void(const rocksdb::Status&, const std::string&)>& fail) {
  std::vector<std::string> out;
  for (auto& line : damage) out.push_back("RocksDB: " + line);
  // RocksDB stops without a report at some damage (a record of a recycled
  // log's type, a length past the end): troupe's reader sees it (a crash's
  // torn tail alone is no damage).
  if (out.empty() && wal.damage.empty()) return out; // nothing was damaged
  if (out.empty()) out.push_back("troupe: " + wal.damage + "; RocksDB stopped reading there without a report");
  // An earlier salvage's report: kept with this one's (a crash may have
  // ended that salvage after its records were written and before it
  // returned; this one cannot name what those records already cover).
  std::string earlier;
  if (auto st = db.Get(rocksdb::ReadOptions{}, layout.meta, salvage_report_key, &earlier);
      !st.ok() && !st.IsNotFound())
    fail(st, "cannot read the salvaged store");
  std::map<std::uint32_t, std::string> names;
  for (auto* h : all) names[h->GetID()] = h->GetName();
  std::map<std::uint32_t, rocksdb::ColumnFamilyHandle*> handles;
  for (auto* h : all) handles[h->GetID()] = h;
  auto present = [&](std::uint32_t cf, const std::string& key) {
    auto h = handles.find(cf);
    std::string value;
    if (h == handles.end()) return false;
    auto st = db.Get(rocksdb::ReadOptions{}, h->second, key, &value);
    if (!st.ok() && !st.IsNotFound()) fail(st, "cannot read the salvaged store");
    return st.ok();
  };
  const auto lost = dropped_writes(wal.writes, db.GetLatestSequenceNumber(), names, present);
  rocksdb::WriteBatch markers;
  // Every ID with dropped events, and, when some write could not be
  // decoded, every ID the WAL names (it may have had events there): a
  // record at the last number that may have been handed out.
  std::set<std::string> ids;
  for (auto& [prefix, numbers] : lost.events) ids.insert(prefix);
  if (lost.unreadable_keys) ids.insert(lost.named.begin(), lost.named.end());
  // A dropped deletion's watermark above the store's: written again (its
  // events' deletion may be in a table file, its watermark was not; without
  // it the ID's numbers would start over).
  std::map<std::string, sequence_nr> restored;
  auto restored_of = [&](const std::string& prefix) {
    const auto it = restored.find(prefix);
    return it == restored.end() ? sequence_nr{0} : it->second;
  };
  for (auto& [prefix, to] : lost.watermarks)
    if (layout.read_watermark(prefix) < to) {
      std::string value;
      troupe::detail::put_be<8>(value, to);
      markers.Put(layout.meta, rocksdb_layout::highest_key(prefix), value);
      restored[prefix] = to;
      out.push_back("the deletion of events up to " + std::to_string(to) + " of " + pid_of_prefix(prefix) +
                    " dropped: its number kept");
    }
  for (auto& prefix : ids) {
    const auto kept = std::max(layout.read_highest(prefix), restored_of(prefix));
    const auto pid = pid_of_prefix(prefix);
    auto mark = [&](sequence_nr from, sequence_nr to, bool named) {
      out.push_back("events " + std::to_string(from) + " to " + std::to_string(to) + " of " + pid +
                    (named ? " dropped" : " dropped or never written (an undecodable write may have held some)") +
                    " (numbers kept by a " + std::string(events_lost_manifest) + " record at " + std::to_string(to) +
                    ")");
      markers.Put(layout.journal, seq_key(prefix, to), encode_event(events_lost_record(from, to)));
    };
    sequence_nr last = kept;
    sequence_nr top = 0; // the last dropped number above `kept`
    if (auto it = lost.events.find(prefix); it != lost.events.end()) {
      // Dropped numbers below ones the store has (a WAL that is not the
      // newest, read up to its damage only): a record for each run, above
      // what a deletion removed (recovery never reads below that).
      const auto& numbers = it->second;
      const auto deleted = std::max(layout.read_watermark(prefix), restored_of(prefix));
      sequence_nr marked = 0; // the last number the records below cover
      for (auto n = numbers.begin(); n != numbers.end();) {
        auto end = n;
        while (std::next(end) != numbers.end() && *std::next(end) == *end + 1) ++end;
        // From the number after the last one the store has below the run,
        // or the last record below covers (a damaged write's numbers, not
        // taken, may lie between; an earlier salvage's record may be last).
        if (*end >= kept) {
          top = *end;
        } else if (*end > deleted && *end > marked) { // (a record below may cover it already)
          // To the number before the next one the store has: a damaged
          // write's numbers may lie between too.
          const auto next = layout.next_seq(prefix, *end);
          const auto to = next != 0 ? next - 1 : *end;
          if (!present(layout.journal->GetID(), seq_key(prefix, to))) {
            mark(std::max({layout.last_seq(prefix, *n - 1), deleted, marked}) + 1, to, true);
            marked = to;
          }
        }
        n = std::next(end);
      }
      last = std::max(last, top);
    }
    if (lost.unreadable_keys) last = std::max(last, kept + lost.unreadable_keys);
    if (last > kept) mark(kept + 1, last, top == last);
  }
  for (auto& [cf, n] : lost.records)
    out.push_back(std::to_string(n) + " record(s) of " + (rocksdb_layout::reserved(cf) ? cf : "table " + cf) +
                  " dropped");
  if (lost.unreadable_keys)
    out.push_back(std::to_string(lost.unreadable_bytes) +
                  " bytes of writes could not be decoded, and damaged writes may name wrong keys (at most " +
                  std::to_string(lost.unreadable_keys) +
                  " records): the numbers of every persistence ID the WAL names are kept past them; an ID named "
                  "nowhere else in the WAL cannot be");
  constexpr std::string_view before = "an earlier salvage: ";
  for (std::size_t at = 0; at < earlier.size();) {
    auto end = earlier.find('\n', at);
    if (end == std::string::npos) end = earlier.size();
    const std::string_view line(earlier.data() + at, end - at);
    if (!line.empty()) out.push_back(line.starts_with(before) ? std::string(line) : std::string(before) += line);
    at = end + 1;
  }
  // The report, kept in the store; and something to flush, so that the
  // flush moves every column family past the damaged WAL, which RocksDB
  // then deletes (when nothing before the damage was kept, it stayed, and
  // the next ordinary open refused it again).
  std::string report;
  for (auto& line : out) report += line + "\n";
  markers.Put(layout.meta, salvage_report_key, report);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  if (auto st = db.Write(wo, &markers); !st.ok()) fail(st, "cannot write the salvage's markers");
  rocksdb::FlushOptions fo;
  fo.wait = true;
  if (auto st = db.Flush(fo, all); !st.ok()) fail(st, "cannot flush the salvaged store");
  return out;
}

} // namespace troupe::persistence::detail
