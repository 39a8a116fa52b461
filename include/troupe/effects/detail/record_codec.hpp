#pragma once

// An outbox record and its stored form (docs/storage.md).

#include <troupe/error.hpp>
#include <troupe/effects/effect.hpp>
#include <troupe/effects/effect_info.hpp>
#include <troupe/effects/error.hpp>
#include <troupe/detail/compile_mode.hpp>

#include <charconv>
#include <cstdint>
#include <exception>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe::effects::detail {

/// The most history entries a record keeps (the oldest are dropped).
inline constexpr std::size_t max_history = 32;

/// An outbox record: the effect as the dispatcher keeps it, plus the
/// request and when it is due next.
struct record {
  effect_info info;
  std::string request;
  std::int64_t due_ms = 0;
  /// The dispatcher that reported its latest outcome to the owner (the
  /// sender of that delivery); empty before, or in a record written before
  /// the field was.
  std::string reporter;
  /// Its owner confirmed the latest outcome (its reporter heard so): from
  /// then on the store may drop the record once its retention has passed.
  /// (A finished record written before the field was counts as confirmed.)
  bool confirmed = false;

  void note(std::int64_t now, std::string action, std::string result, std::string detail) {
    auto& h = info.history;
    if (h.size() == max_history) h.erase(h.begin());
    h.push_back({now, std::move(action), std::move(result), std::move(detail)});
  }
};

// -- the stored form: a format byte, then JSON --------------------------------
//
// These records are written a few times per effect; their readability in a
// store dump is worth more than bytes. The JSON's field names are the
// members of `stored_record` (Boost.Describe, in impl/record_codec.ipp),
// in their order. `encode` and `decode`
// write and read that text without building JSON values (a record is
// encoded and decoded several times per effect); the described forms
// define it, and tests hold the two to each other.

inline constexpr char record_format = 1;

/// The stored form as Boost.Describe gives it: the reference that
/// `encode` writes byte for byte, and what it falls back to.
TROUPE_DECL std::string encode_described(const record& r);

/// Reads any stored form, through Boost.Describe: the reference `decode`
/// agrees with, and what it falls back to. Throws `errc::corrupt_record`
/// naming the operation for a record that cannot be read.
TROUPE_DECL record decode_described(std::string_view id, std::string_view v);

namespace record_text {

/// `s` as a JSON string, escaped as Boost.JSON's serializer escapes it.
inline void append_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  std::size_t plain = 0; // start of the run not yet appended
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + plain, i - plain);
    plain = i + 1;
    out += '\\';
    switch (c) {
    case '"': out += '"'; break;
    case '\\': out += '\\'; break;
    case '\b': out += 'b'; break;
    case '\t': out += 't'; break;
    case '\n': out += 'n'; break;
    case '\f': out += 'f'; break;
    case '\r': out += 'r'; break;
    default:
      out += "u00";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  out.append(s.data() + plain, s.size() - plain);
  out += '"';
}

inline void append_number(std::string& out, std::int64_t n) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
  out.append(digits, end);
}

/// Reads the text `encode` writes, and nothing else: the members in their
/// order, no white space, numbers without a fraction, an exponent or a
/// leading zero, strings with only the escapes `append_string` writes.
/// Whatever it reads, `decode_described` reads the same way; it refuses
/// (returns false) the rest, which `decode` hands to `decode_described`.
class reader {
public:
  explicit reader(std::string_view text) noexcept : p_(text.data()), end_(text.data() + text.size()) {}

  bool record(detail::record& r) {
    auto& i = r.info;
    if (!(literal(R"({"type":)") && string(i.type) && literal(R"(,"owner":)") && string(i.owner) &&
          literal(R"(,"status":)") && status(i.status) && literal(R"(,"in_doubt":)") && boolean(i.in_doubt) &&
          literal(R"(,"attempts":)") && number(i.attempts) && literal(R"(,"queries":)") && number(i.queries) &&
          literal(R"(,"round":)") && number(i.round) && literal(R"(,"result":)") && string(i.result) &&
          literal(R"(,"reason":)") && string(i.reason) && literal(R"(,"created":)") && number(i.created_ms) &&
          literal(R"(,"finished":)") && number(i.finished_ms) && literal(R"(,"due":)") && number(r.due_ms) &&
          literal(R"(,"request":)") && string(r.request) && literal(R"(,"history":[)")))
      return false;
    for (bool first = true; !literal("]"); first = false) {
      auto& h = i.history.emplace_back();
      if (!((first || literal(",")) && literal(R"({"t":)") && number(h.time_ms) && literal(R"(,"action":)") &&
            string(h.action) && literal(R"(,"result":)") && string(h.result) && literal(R"(,"detail":)") &&
            string(h.detail) && literal("}")))
        return false;
    }
    return literal(R"(,"reporter":)") && string(r.reporter) && literal(R"(,"confirmed":)") && boolean(r.confirmed) &&
           literal("}") && p_ == end_;
  }

private:
  bool literal(std::string_view s) noexcept {
    if (static_cast<std::size_t>(end_ - p_) < s.size() || std::string_view(p_, s.size()) != s) return false;
    p_ += s.size();
    return true;
  }
  bool boolean(bool& out) noexcept {
    if (literal("true")) return out = true, true;
    if (literal("false")) return out = false, true;
    return false;
  }
  bool number(std::int64_t& out) noexcept {
    const char* digits = p_ != end_ && *p_ == '-' ? p_ + 1 : p_;
    if (digits == end_ || *digits < '0' || *digits > '9') return false;
    if (*digits == '0' && digits + 1 != end_ && digits[1] >= '0' && digits[1] <= '9') return false; // leading zero
    const auto [next, ec] = std::from_chars(p_, end_, out);
    if (ec != std::errc{} || (next != end_ && (*next == '.' || *next == 'e' || *next == 'E'))) return false;
    p_ = next;
    return true;
  }
  bool number(std::uint32_t& out) noexcept {
    std::int64_t n = 0;
    if (!number(n) || n < 0 || n > std::numeric_limits<std::uint32_t>::max()) return false;
    out = static_cast<std::uint32_t>(n);
    return true;
  }
  bool string(std::string& out) {
    if (p_ == end_ || *p_++ != '"') return false;
    out.clear();
    for (;;) {
      const char* run = p_;
      while (p_ != end_ && *p_ != '"' && *p_ != '\\' && static_cast<unsigned char>(*p_) >= 0x20) ++p_;
      out.append(run, p_);
      if (p_ == end_ || static_cast<unsigned char>(*p_) < 0x20) return false; // cut short, or a raw control byte
      if (out.size() > boost::json::string::max_size()) return false;       // more than Boost.JSON reads
      if (*p_++ == '"') return true;
      if (p_ == end_) return false;
      switch (*p_++) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case 'b': out += '\b'; break;
      case 't': out += '\t'; break;
      case 'n': out += '\n'; break;
      case 'f': out += '\f'; break;
      case 'r': out += '\r'; break;
      case 'u': { // only "\u00" and two lower-case hex digits of a control byte
        if (end_ - p_ < 4 || p_[0] != '0' || p_[1] != '0') return false;
        const auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
        const int hi = hex(p_[2]), lo = hex(p_[3]);
        if (hi < 0 || hi > 1 || lo < 0) return false;
        out += static_cast<char>(hi * 16 + lo);
        p_ += 4;
        break;
      }
      default: return false;
      }
    }
  }
  bool status(effect_status& out) {
    std::string name;
    // (Up to a NUL, as Boost.JSON reads a described enum.)
    return string(name) && boost::describe::enum_from_string(name.c_str(), out);
  }

  const char* p_;
  const char* end_;
};

} // namespace record_text

/// The stored form of `r` (as `encode_described` writes it).
TROUPE_DECL std::string encode(const record& r);

/// The record stored as `v` (as `decode_described` reads it). Throws
/// `errc::corrupt_record` naming the operation for a record that cannot be
/// read.
TROUPE_DECL record decode(std::string_view id, std::string_view v);

} // namespace troupe::effects::detail

#if defined(TROUPE_HEADER_ONLY)
#include <troupe/effects/impl/record_codec.ipp>
#endif
