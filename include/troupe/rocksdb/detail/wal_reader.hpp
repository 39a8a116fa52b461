#pragma once

// A salvage: what the WAL of a damaged store holds that its point-in-time
// recovery drops, named write by write, and the markers that keep the
// dropped events' sequence numbers from ever being handed out again.
//
// RocksDB's own reader gives up on the rest of a 32 KiB block after a bad
// checksum (and point-in-time recovery on everything after it), so it cannot
// say what it dropped. This reader follows the documented log format
// (RocksDB wiki, "Write Ahead Log File Format"): blocks of 32 KiB; each
// physical record a header — masked CRC-32C of type and data (4 bytes,
// little-endian), data length (2, little-endian), type (1: full, 2: first,
// 3: middle, 4: last; 0: zero padding) — then the data; a write is the
// data of one full record, or of a first, middles and a last, and is a
// `WriteBatch`'s representation. It goes on after a damaged record whose
// length is plausible; a damaged write's keys are not trusted (a flipped
// byte may have changed one), the writes around it bound them.

#include <troupe/persistence/records.hpp>
#include <troupe/persistence/detail/codec.hpp>
#include <troupe/persistence/detail/crc32c.hpp>
#include <troupe/detail/bytes.hpp>


#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::persistence::detail {

/// One write found in a WAL file.
/// One key a write puts or deletes.
struct wal_key {
  std::uint32_t cf = 0; // column family ID
  std::string key;
  bool put = false;  // a value (not a deletion)
  std::string value; // a put's value, if of 8 bytes at most (a deletion watermark's)
};

struct wal_write {
  std::uint64_t sequence = 0; // RocksDB's sequence number of its first key
  bool damaged = false;       // a checksum failed: its keys may be wrong
  bool repaired = false;      // a record's header byte or data bit was damaged: set right, it passes its checksum
  bool readable = false;      // its batch decoded
  bool after_damage = false;  // at or after damage in its file, where RocksDB stops reading it
  std::size_t bytes = 0;
  std::size_t offset = 0; // in its file
  std::vector<wal_key> keys;
};

/// The keys of a `WriteBatch` representation (RocksDB's documented layout:
/// sequence number (8 bytes, little-endian), count (4), then per record a
/// tag, a varint32 column family ID for the column-family tags, and
/// varint32-length-prefixed key and value). troupe's own reader: RocksDB's
/// `WriteBatch::Iterate` asserts (aborts the process, in a build with
/// assertions) on a damaged batch. False if `rep` does not parse.
inline bool batch_keys(std::string_view rep, std::uint64_t& sequence, std::vector<wal_key>& keys) {
  if (rep.size() < 12) return false;
  sequence = troupe::detail::get_le(rep, 0, 8);
  const auto count = static_cast<std::uint32_t>(troupe::detail::get_le(rep, 8, 4));
  std::size_t pos = 12;
  auto varint = [&](std::uint32_t& v) {
    v = 0;
    for (int shift = 0; shift <= 28 && pos < rep.size(); shift += 7) {
      const auto b = std::uint8_t(rep[pos++]);
      v |= std::uint32_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  auto slice = [&](std::string_view& out) {
    std::uint32_t n = 0;
    if (!varint(n) || n > rep.size() - pos) return false;
    out = rep.substr(pos, n);
    pos += n;
    return true;
  };
  std::uint32_t seen = 0;
  while (pos < rep.size()) {
    const auto tag = std::uint8_t(rep[pos++]);
    std::uint32_t cf = 0;
    std::string_view key, value;
    switch (tag) {
    case 0x4: case 0x5: case 0x8: case 0xE: // with a column family: deletion, value, single deletion, range deletion
      if (!varint(cf)) return false;
      [[fallthrough]];
    case 0x0: case 0x1: case 0x7: case 0xF: // default column family
      if (!slice(key)) return false;
      if ((tag == 0x1 || tag == 0x5 || tag == 0xE || tag == 0xF) && !slice(value)) return false;
      break;
    default: return false; // nothing troupe writes
    }
    const bool put = tag == 0x1 || tag == 0x5;
    keys.push_back({cf, std::string(key), put, put && value.size() <= 8 ? std::string(value) : std::string()});
    ++seen;
  }
  return seen == count;
}

/// The writes of the WAL file `path`, in order.
inline std::vector<wal_write> read_wal(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  constexpr std::size_t block = 32768, header = 7;
  auto u32 = [&](std::size_t at) { return static_cast<std::uint32_t>(troupe::detail::get_le(file, at, 4)); };
  // The record at `at`, if its header is plausible: its type and length.
  auto record_at = [&](std::size_t at, int& type, std::size_t& length) {
    if (at + header > file.size()) return false;
    const std::size_t left_in_block = block - at % block;
    if (left_in_block < header) return false;
    length = static_cast<std::size_t>(troupe::detail::get_le(file, at + 4, 2));
    type = std::uint8_t(file[at + 6]);
    return type >= 1 && type <= 4 && header + length <= left_in_block && at + header + length <= file.size();
  };
  auto checksum_ok = [&](std::size_t at, int type, std::size_t length) {
    crc32c_state crc;
    const char t = static_cast<char>(type);
    crc.update({&t, 1});
    crc.update(std::string_view(file.data() + at + header, length));
    const std::uint32_t c = crc.value();
    return ((c >> 15) | (c << 17)) + 0xa282ead8u == u32(at);
  };
  // The record at `at` if one byte of its header was damaged: its type and
  // length with that byte set right, such that the record fits and passes
  // its checksum. RocksDB takes a length that a flipped bit pushed past the
  // end of the file, or a recycled log's type, for a crash's torn tail and
  // stops there without a report, so the last record would be dropped
  // silently; a tear is never repaired (about 1,500 candidates, each
  // passing the checksum by chance once in 2^32).
  auto repair_at = [&](std::size_t at, int& type, std::size_t& length) {
    if (at + header > file.size() || block - at % block < header) return false;
    const int t0 = std::uint8_t(file[at + 6]);
    const std::size_t l0 = static_cast<std::size_t>(troupe::detail::get_le(file, at + 4, 2));
    auto fits = [&](int t, std::size_t l) {
      return t >= 1 && t <= 4 && header + l <= block - at % block && at + header + l <= file.size();
    };
    for (int shift : {0, 8}) // a damaged byte of the length
      for (std::size_t b = 0; b < 256; ++b) {
        const std::size_t l = (l0 & ~(std::size_t(0xff) << shift)) | b << shift;
        if (l != l0 && fits(t0, l) && checksum_ok(at, t0, l)) return type = t0, length = l, true;
      }
    for (int t = 1; t <= 4; ++t) // of the type
      if (t != t0 && fits(t, l0) && checksum_ok(at, t, l0)) return type = t, length = l0, true;
    if (!fits(t0, l0)) return false;
    crc32c_state crc; // of the checksum itself: the one it should be differs in one byte
    const char t = static_cast<char>(t0);
    crc.update({&t, 1});
    crc.update(std::string_view(file.data() + at + header, l0));
    const std::uint32_t c = crc.value();
    const std::uint32_t diff = (((c >> 15) | (c << 17)) + 0xa282ead8u) ^ u32(at);
    if (diff == 0) return false; // not damaged at all
    for (int shift = 0; shift < 32; shift += 8)
      if ((diff & ~(0xffu << shift)) == 0) return type = t0, length = l0, true;
    return false;
  };
  // The bit of the data of the record at `at` (a plausible header) whose
  // flip makes it pass its checksum, if one does (else `no_bit`): a CRC's
  // difference for one flipped bit depends only on the bit's distance from
  // the end (the CRC is linear), and tells it apart from every other
  // bit's. A write whose one
  // flipped bit is found is read as it was written (a flipped bit in a key's
  // ID had made a salvage name an ID that does not exist, and keep none of
  // the true one's numbers). Records up to 4 KiB only: damage to more than
  // one bit is taken for one bit's at most once in 2^32 / 32,768.
  constexpr std::size_t no_bit = static_cast<std::size_t>(-1);
  auto repair_bit = [&](std::size_t at, int type, std::size_t length) -> std::size_t {
    if (length == 0 || length > 4096) return no_bit;
    crc32c_state crc;
    const char t = static_cast<char>(type);
    crc.update({&t, 1});
    crc.update(std::string_view(file.data() + at + header, length));
    const std::uint32_t masked = u32(at) - 0xa282ead8u;
    const std::uint32_t difference = crc.value() ^ ((masked >> 17) | (masked << 15));
    if (difference == 0) return no_bit;
    auto shift8 = [](std::uint32_t r) { // eight zero bits through the register (reflected CRC-32C)
      for (int k = 0; k < 8; ++k) r = (r >> 1) ^ ((r & 1) ? 0x82f63b78u : 0u);
      return r;
    };
    std::uint32_t bits[8]; // the difference a flip of each bit of the byte makes
    for (int j = 0; j < 8; ++j) bits[j] = shift8(1u << j);
    for (std::size_t i = length; i-- > 0;) { // from the last byte: one more byte after it each step
      for (int j = 0; j < 8; ++j)
        if (bits[j] == difference) return i * 8 + static_cast<std::size_t>(j);
      for (auto& b : bits) b = shift8(b);
    }
    return no_bit;
  };
  // A record with a good checksum starts at `at` (or the block or the file
  // ends there: nothing to check).
  auto good_at = [&](std::size_t at) {
    if (at + header > file.size() || block - at % block < header) return true;
    int type = 0;
    std::size_t length = 0;
    if (file[at + 6] == 0 && file[at + 4] == 0 && file[at + 5] == 0) return true; // zeroes: end of what was written
    return record_at(at, type, length) && checksum_ok(at, type, length);
  };

  std::vector<wal_write> out;
  std::string data;
  bool damaged = false, repaired = false, open = false;
  std::size_t unreadable = 0; // bytes skipped since the last write
  std::size_t start = 0;      // where the write being gathered begins
  auto finish = [&] {
    wal_write w;
    w.offset = start;
    w.damaged = damaged || unreadable > 0;
    w.repaired = repaired;
    w.bytes = data.size() + unreadable;
    w.readable = batch_keys(data, w.sequence, w.keys);
    if (!w.readable) w.keys.clear();
    out.push_back(std::move(w));
    data.clear();
    damaged = repaired = open = false;
    unreadable = 0;
  };
  auto skip_unreadable = [&](std::size_t from, std::size_t to) {
    if (open) finish(); // what was gathered of it is all there is
    start = from;
    unreadable += to - from;
    damaged = true;
    open = true; // an unreadable stretch is a (damaged) write of its own
    data.clear();
    finish();
  };
  std::size_t pos = 0;
  while (pos + header <= file.size()) {
    const std::size_t left_in_block = block - pos % block;
    if (left_in_block < header) { // the block's trailer: padding
      pos += left_in_block;
      continue;
    }
    if (file[pos + 6] == 0 && file[pos + 4] == 0 && file[pos + 5] == 0) { // zeroes: never written
      pos += left_in_block;
      continue;
    }
    int type = 0;
    std::size_t length = 0;
    const bool plausible = record_at(pos, type, length);
    bool ok = plausible && checksum_ok(pos, type, length);
    bool fixed = !ok && repair_at(pos, type, length);
    const std::size_t flipped = !ok && !fixed && plausible ? repair_bit(pos, type, length) : no_bit;
    fixed = fixed || flipped != no_bit;
    ok = ok || fixed;
    if (!ok && !(plausible && good_at(pos + header + length))) {
      // The header itself is damaged: find the next record with a good
      // checksum in this block; what lies between cannot be read.
      std::size_t next = pos + 1;
      const std::size_t end = pos + left_in_block;
      while (next < end && !(good_at(next) && file[next + 6] != 0)) ++next;
      skip_unreadable(pos, next);
      pos = next;
      continue;
    }
    // Good, or damaged in its payload only (the next record follows it).
    if (type == 1 || type == 2) {
      if (open) finish();
      open = true;
      start = pos;
    }
    data.append(file, pos + header, length);
    if (flipped != no_bit) data[data.size() - length + flipped / 8] ^= static_cast<char>(1u << (flipped % 8));
    damaged = damaged || !ok;
    repaired = repaired || fixed;
    if (type == 1 || type == 4) finish();
    pos += header + length;
  }
  if (open) {
    damaged = true; // incomplete: a crash while writing it
    finish();
  }
  return out;
}

/// What a salvage dropped: per persistence ID (its key prefix) the dropped
/// event numbers' range; per other column family the count of records; and
/// for writes that could not be decoded, their bytes and a bound on the keys
/// they held, with every persistence ID the WAL's readable writes name (one
/// of them may have had events in those).
struct dropped {
  std::map<std::string, std::set<sequence_nr>> events; // prefix -> the dropped numbers
  std::map<std::string, sequence_nr> watermarks;       // prefix -> a dropped deletion watermark (`meta` "h")
  std::map<std::string, std::size_t> records;          // column family -> count
  std::size_t unreadable_bytes = 0;
  std::uint64_t unreadable_keys = 0; // at most
  std::set<std::string> named;       // journal prefixes of the readable writes
};

/// The writes of `writes` after RocksDB's sequence number `kept` (the last
/// one the salvaged database has), and the damaged ones; `names` maps column
/// family IDs to names. Of a write that RocksDB skipped for damage before it
/// in an older WAL (`after_damage`) but whose number is below `kept`, a put
/// counts only if `present(column family ID, key)` says the store does not
/// have its key, a deletion only if it does (a column family flushed after
/// that WAL was written has those writes in its table files).
template <class Present>
dropped dropped_writes(const std::vector<wal_write>& writes, std::uint64_t kept,
                       const std::map<std::uint32_t, std::string>& names, Present present) {
  dropped out;
  std::uint64_t next_sequence = 0; // what the write after the last readable one starts at
  bool gap_open = false;           // unreadable writes since the last readable one
  for (auto& w : writes) {
    if (!w.readable) {
      out.unreadable_bytes += w.bytes;
      gap_open = true;
      continue;
    }
    // A damaged write that still decodes may name the wrong keys and start
    // at the wrong number (a flipped byte in one): none of its numbers is
    // taken (a flipped bit in a key's number made it 2^63 more), only their
    // count, which its decoding checked, and the IDs its journal keys name
    // (an ID named by it alone keeps its numbers too; a damaged ID at worst
    // gets a marker of its own).
    if (w.damaged) {
      out.unreadable_keys += w.keys.size();
      for (auto& k : w.keys)
        if (auto n = names.find(k.cf); n != names.end() && n->second == "journal" && k.key.size() > 10)
          out.named.insert(k.key.substr(0, k.key.size() - 8));
      continue;
    }
    if (gap_open) {
      // The keys the unreadable writes held: the numbers between.
      if (next_sequence && w.sequence > next_sequence) out.unreadable_keys += w.sequence - next_sequence;
      else if (!next_sequence) out.unreadable_keys += out.unreadable_bytes; // none before: bytes bound keys
      gap_open = false;
    }
    next_sequence = w.sequence + w.keys.size();
    // Past the last number RocksDB kept, or past damage in a WAL that is not
    // the newest (RocksDB stops reading that file there and goes on with
    // the next, whose numbers are higher).
    const bool lost = w.sequence > kept || w.after_damage;
    const bool check = w.sequence <= kept; // skipped in an older WAL: the store may have it all the same
    for (auto& [cf, key, put, value] : w.keys) {
      auto n = names.find(cf);
      const std::string name = n == names.end() ? "column family " + std::to_string(cf) : n->second;
      // A deletion's watermark (the highest number it removed), whatever the
      // store has now: the salvage keeps the higher one.
      if (lost && put && name == "meta" && key.size() > 1 && key[0] == 'h' && value.size() == 8) {
        auto& v = out.watermarks[key.substr(1)];
        v = std::max(v, get_be(value, 0, 8));
      }
      const bool dropped = lost && (!check || present(cf, key) != put);
      if (name == "journal" && key.size() > 10) {
        const auto prefix = key.substr(0, key.size() - 8);
        out.named.insert(prefix);
        // Only a put is an event (a deletion's key, `delete_up_to`'s up to
        // the largest number, is none).
        if (dropped && put) out.events[prefix].insert(seq_of_key(key));
      } else if (dropped) {
        ++out.records[name];
      }
    }
  }
  if (gap_open) out.unreadable_keys += out.unreadable_bytes; // at the end: bytes bound keys
  return out;
}

/// Damage among a log's records that is not a crash's torn tail: a write
/// that fails its checksum (or cannot be read) followed by an intact one,
/// or a record that one damaged byte of its header (set right, it passes
/// its checksum) made look like the end, anywhere. `batches`: the records
/// are writes (a WAL's), and only one that decodes counts as intact;
/// otherwise (a MANIFEST's edits) any that passes its checksum does.
struct log_damage {
  std::size_t index = 0;  // of the first damaged write
  std::size_t intact = 0; // writes after it
};
inline std::optional<log_damage> damage_in(const std::vector<wal_write>& writes, bool batches = true) {
  for (std::size_t i = 0; i < writes.size(); ++i) {
    if (!writes[i].damaged && !writes[i].repaired) continue;
    log_damage d{i, 0};
    std::optional<std::size_t> repaired;
    for (std::size_t j = i; j < writes.size(); ++j) {
      if (writes[j].repaired && !repaired) repaired = j;
      if (j > i && !writes[j].damaged && !writes[j].repaired && (writes[j].readable || !batches)) ++d.intact;
    }
    if (d.intact > 0) return d;
    if (!repaired) return std::nullopt; // a torn tail: the crash's, never acknowledged
    d.index = *repaired;                // damaged (or torn) writes before it, none intact: it is the damage
    return d;
  }
  return std::nullopt;
}

/// Damage `d` among the records `writes` of the file `path`, in words.
inline std::string describe_damage(const std::string& path, const std::vector<wal_write>& writes,
                                   const log_damage& d, bool batches = true) {
  const auto& w = writes[d.index];
  return path + ": a record at byte " + std::to_string(w.offset) +
         (w.repaired ? " has a damaged byte in its header (set right, the record passes its checksum)"
                     : " fails its checksum or cannot be read") +
         (d.intact ? ", and is followed by " + std::to_string(d.intact) + " intact " +
                         (batches ? "write(s)" : "record(s)")
                   : std::string(", which is no crash's torn tail"));
}

/// Damage inside the WAL file `path` (or, `batches` false, a MANIFEST)
/// that is not a crash's torn tail (`damage_in`). RocksDB takes a record
/// whose length runs past its block, or one of a recycled log's type, for
/// the end of what was written and recovers to the point before it,
/// without a report: this finds what such a recovery would silently drop.
/// Empty if none.
inline std::string damage_before_end(const std::string& path, bool batches = true) {
  const auto writes = read_wal(path);
  const auto d = damage_in(writes, batches);
  return d ? describe_damage(path, writes, *d, batches) : std::string();
}

/// Damage inside the MANIFEST that the store's CURRENT file names (RocksDB's
/// log of the store's column families and table files, in the WAL's
/// format) that is not a crash's torn tail. RocksDB would take it for the
/// end of the file and open the store as the edits before it describe it:
/// without the column families and files added after, which it would then
/// create anew, empty, or delete. Empty if none (or no CURRENT to read:
/// RocksDB refuses that itself).
inline std::string manifest_damage(const std::string& store) {
  std::ifstream current(store + "/CURRENT");
  std::string name;
  if (!std::getline(current, name) || !name.starts_with("MANIFEST-") || name.find('/') != std::string::npos)
    return {};
  const auto path = store + "/" + name;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return {};
  return damage_before_end(path, false);
}

/// The persistence ID of a key prefix (`id_prefix`).
inline std::string pid_of_prefix(std::string_view prefix) {
  return prefix.size() > 2 ? std::string(prefix.substr(2)) : std::string();
}

/// The marker recovery passes over: numbers `from` to `to` were dropped.
inline event_record events_lost_record(sequence_nr from, sequence_nr to) {
  return {to, std::string(events_lost_manifest), 1,
          "{\"from\":" + std::to_string(from) + ",\"to\":" + std::to_string(to) + "}"};
}

} // namespace troupe::persistence::detail
