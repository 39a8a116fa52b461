#pragma once

// A check of a store's table files before RocksDB opens them: RocksDB 7.8
// parses a table's properties block before it verifies its checksum (an
// ingested file's may have been changed in place), and a flipped bit in
// that block's footer makes it take the block for one with a hash index:
// an assertion stops the process (Debian builds RocksDB with assertions;
// without them it reads out of bounds). This reads the documented
// block-based table format (RocksDB wiki, "Rocksdb BlockBasedTable
// Format"): a 53-byte footer at the file's end (checksum type, the
// metaindex block's handle, the index block's, padding, the format
// version, the magic number), handles as two varint64s (offset, size), a
// block's last four bytes its restart count with the index type in bit 31.
// Anything it cannot follow is left to RocksDB, which reports it.

#include <troupe/detail/bytes.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace troupe::persistence::detail {

/// Damage in the table file `path` that RocksDB would stop the process on
/// rather than report; empty if none found.
inline std::string table_file_damage(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::uint64_t>(in.tellg());
  auto read_at = [&](std::uint64_t offset, std::uint64_t n, std::string& out) {
    out.assign(n, '\0');
    in.seekg(static_cast<std::streamoff>(offset));
    return static_cast<bool>(in.read(out.data(), static_cast<std::streamsize>(n)));
  };
  auto varint = [](std::string_view s, std::size_t& pos, std::uint64_t& v) {
    v = 0;
    for (int shift = 0; shift <= 63 && pos < s.size(); shift += 7) {
      const auto b = std::uint8_t(s[pos++]);
      v |= std::uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  constexpr std::uint64_t footer_size = 53, magic = 0x88e241b785f4cff7ull;
  std::string footer;
  if (size < footer_size || !read_at(size - footer_size, footer_size, footer)) return {};
  const auto version = troupe::detail::get_le(footer, 41, 4);
  if (troupe::detail::get_le(footer, 45, 8) != magic || version < 1 || version > 5) return {};
  std::size_t pos = 1;
  std::uint64_t meta_offset = 0, meta_size = 0;
  if (!varint(footer, pos, meta_offset) || !varint(footer, pos, meta_size)) return {};
  std::string meta;
  if (meta_size < 4 || meta_offset + meta_size > size || !read_at(meta_offset, meta_size, meta)) return {};
  const auto restarts = troupe::detail::get_le(meta, meta.size() - 4, 4) & 0x7fffffffu;
  if ((restarts + 1) * 4 > meta.size()) return {};
  const std::size_t entries_end = meta.size() - (restarts + 1) * 4;
  std::string key;
  for (pos = 0; pos < entries_end;) {
    std::uint64_t shared = 0, non_shared = 0, value_size = 0;
    if (!varint(meta, pos, shared) || !varint(meta, pos, non_shared) || !varint(meta, pos, value_size)) return {};
    if (shared > key.size() || non_shared + value_size > entries_end - pos) return {};
    key.resize(shared);
    key.append(meta, pos, non_shared);
    pos += non_shared;
    const std::string_view value(meta.data() + pos, value_size);
    pos += value_size;
    if (key != "rocksdb.properties") continue;
    std::size_t at = 0;
    std::uint64_t offset = 0, block_size = 0;
    std::string tail;
    if (!varint(value, at, offset) || !varint(value, at, block_size) || block_size < 4 ||
        offset + block_size > size || !read_at(offset + block_size - 4, 4, tail))
      return {};
    // Properties blocks never have a hash index (RocksDB ignores the bit
    // in blocks over 64 KiB).
    if ((troupe::detail::get_le(tail, 0, 4) >> 31) && block_size <= 65535)
      return path + ": its properties block's footer is damaged (it names a hash index, and RocksDB would stop "
                    "the process on it before checking the block's checksum)";
    return {};
  }
  return {};
}

/// `table_file_damage` of every table file of the store at `dir`.
inline std::string tables_damage(const std::string& dir) {
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".sst")
      if (auto d = table_file_damage(e.path().string()); !d.empty()) return d;
  return {};
}

} // namespace troupe::persistence::detail
