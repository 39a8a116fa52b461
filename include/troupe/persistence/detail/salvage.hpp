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
// length is plausible, and decodes the damaged write too where it can: the
// keys of every write are named.

#include <troupe/persistence/records.hpp>
#include <troupe/persistence/detail/codec.hpp>
#include <troupe/persistence/detail/crc32c.hpp>

#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::persistence::detail {

/// One write found in a WAL file.
struct wal_write {
  std::uint64_t sequence = 0; // RocksDB's sequence number of its first key
  bool damaged = false;       // a checksum failed: its keys may be wrong
  bool readable = false;      // its batch decoded
  std::size_t bytes = 0;
  /// (column family ID, key) of each put or delete.
  std::vector<std::pair<std::uint32_t, std::string>> keys;
};

/// The writes of the WAL file `path`, in order.
inline std::vector<wal_write> read_wal(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  constexpr std::size_t block = 32768, header = 7;
  auto u32 = [&](std::size_t at) {
    return std::uint32_t(std::uint8_t(file[at])) | std::uint32_t(std::uint8_t(file[at + 1])) << 8 |
           std::uint32_t(std::uint8_t(file[at + 2])) << 16 | std::uint32_t(std::uint8_t(file[at + 3])) << 24;
  };
  std::vector<wal_write> out;
  std::string data;
  bool damaged = false, open = false;
  auto finish = [&] {
    wal_write w;
    w.damaged = damaged;
    w.bytes = data.size();
    if (data.size() >= 12) {
      std::uint64_t seq = 0;
      for (int i = 7; i >= 0; --i) seq = seq << 8 | std::uint8_t(data[static_cast<std::size_t>(i)]);
      w.sequence = seq;
      struct collect : rocksdb::WriteBatch::Handler {
        std::vector<std::pair<std::uint32_t, std::string>>* keys;
        rocksdb::Status PutCF(uint32_t cf, const rocksdb::Slice& k, const rocksdb::Slice&) override {
          keys->emplace_back(cf, k.ToString());
          return rocksdb::Status::OK();
        }
        rocksdb::Status DeleteCF(uint32_t cf, const rocksdb::Slice& k) override {
          keys->emplace_back(cf, k.ToString());
          return rocksdb::Status::OK();
        }
        rocksdb::Status SingleDeleteCF(uint32_t cf, const rocksdb::Slice& k) override {
          keys->emplace_back(cf, k.ToString());
          return rocksdb::Status::OK();
        }
        rocksdb::Status DeleteRangeCF(uint32_t cf, const rocksdb::Slice& b, const rocksdb::Slice&) override {
          keys->emplace_back(cf, b.ToString());
          return rocksdb::Status::OK();
        }
        rocksdb::Status MergeCF(uint32_t cf, const rocksdb::Slice& k, const rocksdb::Slice&) override {
          keys->emplace_back(cf, k.ToString());
          return rocksdb::Status::OK();
        }
      } c;
      c.keys = &w.keys;
      try {
        rocksdb::WriteBatch batch(data);
        w.readable = batch.Iterate(&c).ok();
      } catch (...) {
        w.readable = false;
      }
      if (!w.readable) w.keys.clear();
    }
    out.push_back(std::move(w));
    data.clear();
    damaged = open = false;
  };
  std::size_t pos = 0;
  while (pos + header <= file.size()) {
    const std::size_t left_in_block = block - pos % block;
    if (left_in_block < header) { // the block's trailer: padding
      pos += left_in_block;
      continue;
    }
    const auto length = std::size_t(std::uint8_t(file[pos + 4])) | std::size_t(std::uint8_t(file[pos + 5])) << 8;
    const int type = std::uint8_t(file[pos + 6]);
    if (type == 0 && length == 0) { // zeroes: preallocated, never written
      pos += left_in_block;
      continue;
    }
    if (header + length > left_in_block || pos + header + length > file.size() || type < 1 || type > 4) {
      // A length or type beyond belief: the rest of the block is lost.
      if (open) damaged = true;
      pos += left_in_block;
      continue;
    }
    const std::string_view payload(file.data() + pos + header, length);
    crc32c_state crc;
    const char t = static_cast<char>(type);
    crc.update({&t, 1});
    crc.update(payload);
    const std::uint32_t c = crc.value();
    const std::uint32_t masked = ((c >> 15) | (c << 17)) + 0xa282ead8u;
    const bool ok = masked == u32(pos);
    if (type == 1 || type == 2) {
      if (open) finish();
      open = true;
    }
    data.append(payload);
    damaged = damaged || !ok;
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
/// event numbers' range; per other column family the count of records;
/// the bytes of writes that could not be decoded at all.
struct dropped {
  std::map<std::string, std::pair<sequence_nr, sequence_nr>> events; // prefix -> [first, last]
  std::map<std::string, std::size_t> records;                       // column family -> count
  std::size_t unreadable_bytes = 0;
};

/// The writes of `writes` after RocksDB's sequence number `kept` (the last
/// one the salvaged database has), and the damaged ones; `names` maps column
/// family IDs to names.
inline dropped dropped_writes(const std::vector<wal_write>& writes, std::uint64_t kept,
                              const std::map<std::uint32_t, std::string>& names) {
  dropped out;
  for (auto& w : writes) {
    if (w.readable && !w.damaged && w.sequence <= kept) continue;
    if (!w.readable) {
      out.unreadable_bytes += w.bytes;
      continue;
    }
    for (auto& [cf, key] : w.keys) {
      auto n = names.find(cf);
      const std::string name = n == names.end() ? "column family " + std::to_string(cf) : n->second;
      if (name == "journal" && key.size() > 10) {
        const auto prefix = key.substr(0, key.size() - 8);
        const auto seq = seq_of_key(key);
        auto [it, fresh] = out.events.try_emplace(prefix, seq, seq);
        if (!fresh) {
          it->second.first = std::min(it->second.first, seq);
          it->second.second = std::max(it->second.second, seq);
        }
      } else {
        ++out.records[name];
      }
    }
  }
  return out;
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
