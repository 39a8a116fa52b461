#pragma once

// The stored forms of the delivery layer's records
// (troupe/delivery/detail/codec.hpp): with TROUPE_SEPARATE_COMPILATION
// compiled once (<troupe/delivery/impl/src.hpp>); header-only, that header
// includes this file.

#include <troupe/delivery/detail/codec.hpp>

namespace troupe::delivery::detail {

TROUPE_DECL std::string encode_outgoing(const outgoing& o, std::uint32_t attempts, std::int64_t dead_ms) {
  using namespace troupe::detail;
  std::string v;
  v.reserve(1 + 4 + o.to.size() + 4 + o.manifest.size() + 4 + 8 + 8 + 4 + 8 + o.payload.size());
  v.push_back(outgoing_format);
  put_u32(v, static_cast<std::uint32_t>(o.to.size()));
  v += o.to;
  put_u32(v, static_cast<std::uint32_t>(o.manifest.size()));
  v += o.manifest;
  put_u32(v, o.version);
  put_u64(v, static_cast<std::uint64_t>(o.created_ms));
  put_u64(v, static_cast<std::uint64_t>(o.first_recorded_ms()));
  put_u32(v, attempts);
  put_u64(v, static_cast<std::uint64_t>(dead_ms));
  v += o.payload;
  return v;
}

TROUPE_DECL error bad_value(std::string_view what) {
  return error(errc::corrupt_record, "unreadable " + std::string(what) + " record in the delivery tables");
}

TROUPE_DECL outgoing decode_outgoing(std::string_view id, std::string_view v, std::uint32_t* attempts,
                                     std::int64_t* dead_ms) {
  troupe::detail::byte_reader in(v);
  try {
    const char format = in.take(1)[0];
    if (format != value_format && format != outgoing_format) throw bad_value("delivery");
    outgoing o;
    o.id = id;
    o.to = in.take(in.be(4));
    o.manifest = in.take(in.be(4));
    o.version = static_cast<std::uint32_t>(in.be(4));
    o.created_ms = static_cast<std::int64_t>(in.be(8));
    o.first_ms = format == outgoing_format ? static_cast<std::int64_t>(in.be(8)) : o.created_ms;
    const auto a = static_cast<std::uint32_t>(in.be(4));
    const auto d = static_cast<std::int64_t>(in.be(8));
    o.payload = in.rest();
    if (attempts) *attempts = a;
    if (dead_ms) *dead_ms = d;
    return o;
  } catch (const std::out_of_range&) {
    throw bad_value("delivery");
  }
}

TROUPE_DECL std::string encode_mark(std::int64_t time_ms, const std::optional<std::string>& reply) {
  std::string v;
  v.reserve(1 + 8 + 1 + (reply ? reply->size() : 0));
  v.push_back(value_format);
  troupe::detail::put_u64(v, static_cast<std::uint64_t>(time_ms));
  v.push_back(reply ? 1 : 0);
  if (reply) v += *reply;
  return v;
}

TROUPE_DECL std::string encode_failure(bool rejected, std::int64_t time_ms, std::uint32_t failures,
                                       std::string_view reason) {
  std::string v;
  v.reserve(1 + 8 + 4 + reason.size());
  v.push_back(rejected ? rejected_format : failing_format);
  troupe::detail::put_u64(v, static_cast<std::uint64_t>(time_ms));
  troupe::detail::put_u32(v, failures);
  v += reason;
  return v;
}

TROUPE_DECL dedup_marks::mark decode_mark(std::string_view v) {
  using Mark = dedup_marks::mark;
  troupe::detail::byte_reader in(v);
  Mark m;
  try {
    const char format = in.take(1)[0];
    m.time_ms = static_cast<std::int64_t>(in.be(8));
    if (format == value_format) {
      if (in.take(1)[0] != 0) m.reply = std::string(in.rest());
    } else if (format == failing_format || format == rejected_format) {
      m.what = format == rejected_format ? Mark::state::rejected : Mark::state::failing;
      m.failures = static_cast<std::uint32_t>(in.be(4));
      m.reason = std::string(in.rest());
    } else {
      throw bad_value("dedup");
    }
    return m;
  } catch (const std::out_of_range&) {
    throw bad_value("dedup");
  }
}

} // namespace troupe::delivery::detail
