#pragma once

// An outbox record and its stored form (docs/storage.md).

#include <troupe/error.hpp>
#include <troupe/effects/effect.hpp>
#include <troupe/effects/effect_info.hpp>
#include <troupe/effects/error.hpp>
#include <troupe/persistence/json.hpp>

#include <boost/describe/class.hpp>
#include <boost/describe/enum_from_string.hpp>
#include <boost/describe/enum_to_string.hpp>
#include <boost/json.hpp>

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
// members' below (Boost.Describe), in this order. `encode` and `decode`
// write and read that text without building JSON values (a record is
// encoded and decoded several times per effect); the described forms
// define it, and tests hold the two to each other.

struct stored_history_entry {
  std::int64_t t = 0;
  std::string action, result, detail;
};
BOOST_DESCRIBE_STRUCT(stored_history_entry, (), (t, action, result, detail))

struct stored_record {
  std::string type, owner;
  effect_status status = effect_status::pending;
  bool in_doubt = false;
  std::uint32_t attempts = 0, queries = 0, round = 0;
  std::string result, reason;
  std::int64_t created = 0, finished = 0, due = 0;
  std::string request;
  std::vector<stored_history_entry> history;
  std::string reporter;
  bool confirmed = false;
};
BOOST_DESCRIBE_STRUCT(stored_record, (),
                      (type, owner, status, in_doubt, attempts, queries, round, result, reason, created, finished, due,
                       request, history, reporter, confirmed))

inline constexpr char record_format = 1;

/// The stored form as Boost.Describe gives it: the reference that
/// `encode` writes byte for byte, and what it falls back to.
inline std::string encode_described(const record& r) {
  const auto& i = r.info;
  stored_record s{i.type,   i.owner,  i.status,     i.in_doubt,    i.attempts, i.queries,  i.round,
                  i.result, i.reason, i.created_ms, i.finished_ms, r.due_ms,   r.request,  {},
                  r.reporter, r.confirmed};
  s.history.reserve(i.history.size());
  for (auto& h : i.history) s.history.push_back({h.time_ms, h.action, h.result, h.detail});
  std::string v(1, record_format);
  v += persistence::to_json_text(s);
  return v;
}

/// Reads any stored form, through Boost.Describe: the reference `decode`
/// agrees with, and what it falls back to. Throws `errc::corrupt_record`
/// naming the operation for a record that cannot be read.
inline record decode_described(std::string_view id, std::string_view v) {
  if (v.empty() || v[0] != record_format)
    throw error(errc::corrupt_record, "outbox record " + std::string(id) + " has an unknown format");
  stored_record s;
  try {
    auto j = boost::json::parse(boost::json::string_view(v.data() + 1, v.size() - 1), {},
                                persistence::json_text_options());
    // Written before records named their reporter: none; before they said
    // whether their outcome was confirmed: a finished one was.
    if (auto* o = j.if_object()) {
      if (!o->contains("reporter")) (*o)["reporter"] = "";
      if (!o->contains("confirmed")) (*o)["confirmed"] = o->contains("status") && (*o)["status"] != "pending";
    }
    s = boost::json::value_to<stored_record>(j);
  } catch (const std::exception& ex) {
    throw error(errc::corrupt_record, "outbox record " + std::string(id) + " cannot be read: " + ex.what());
  }
  record r;
  auto& i = r.info;
  i.id = id;
  i.type = std::move(s.type);
  i.owner = std::move(s.owner);
  i.status = s.status;
  i.in_doubt = s.in_doubt;
  i.attempts = s.attempts;
  i.queries = s.queries;
  i.round = s.round;
  i.result = std::move(s.result);
  i.reason = std::move(s.reason);
  i.created_ms = s.created;
  i.finished_ms = s.finished;
  r.due_ms = s.due;
  r.request = std::move(s.request);
  r.reporter = std::move(s.reporter);
  r.confirmed = s.confirmed;
  i.history.reserve(s.history.size());
  for (auto& h : s.history) i.history.push_back({h.t, std::move(h.action), std::move(h.result), std::move(h.detail)});
  return r;
}

// -- the same text, written and read directly -------------------------------

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
inline std::string encode(const record& r) {
  using record_text::append_number;
  using record_text::append_string;
  const auto& i = r.info;
  const char* status = boost::describe::enum_to_string(i.status, nullptr);
  // A status without a name (a number, as Boost.JSON writes it) or a
  // string Boost.JSON cannot hold (which it refuses): as the reference does.
  const auto fits = [&] {
    const auto max = boost::json::string::max_size();
    for (const auto* t : {&i.type, &i.owner, &i.result, &i.reason, &r.request, &r.reporter})
      if (t->size() > max) return false;
    for (const auto& h : i.history)
      if (h.action.size() > max || h.result.size() > max || h.detail.size() > max) return false;
    return true;
  };
  if (!status || !fits()) return encode_described(r);
  std::string v;
  v.reserve(200 + i.type.size() + i.owner.size() + i.result.size() + i.reason.size() + r.request.size() +
            r.reporter.size() + 64 * i.history.size());
  v += record_format;
  const auto text = [&v](const char* member, std::string_view x) {
    v += member;
    append_string(v, x);
  };
  const auto number = [&v](const char* member, std::int64_t x) {
    v += member;
    append_number(v, x);
  };
  text(R"({"type":)", i.type);
  text(R"(,"owner":)", i.owner);
  v += R"(,"status":")";
  v += status;
  v += R"(","in_doubt":)";
  v += i.in_doubt ? "true" : "false";
  number(R"(,"attempts":)", i.attempts);
  number(R"(,"queries":)", i.queries);
  number(R"(,"round":)", i.round);
  text(R"(,"result":)", i.result);
  text(R"(,"reason":)", i.reason);
  number(R"(,"created":)", i.created_ms);
  number(R"(,"finished":)", i.finished_ms);
  number(R"(,"due":)", r.due_ms);
  text(R"(,"request":)", r.request);
  v += R"(,"history":[)";
  for (std::size_t k = 0; k < i.history.size(); ++k) {
    const auto& h = i.history[k];
    number(k == 0 ? R"({"t":)" : R"(,{"t":)", h.time_ms);
    text(R"(,"action":)", h.action);
    text(R"(,"result":)", h.result);
    text(R"(,"detail":)", h.detail);
    v += '}';
  }
  text(R"(],"reporter":)", r.reporter);
  v += R"(,"confirmed":)";
  v += r.confirmed ? "true}" : "false}";
  return v;
}

/// The record stored as `v` (as `decode_described` reads it). Throws
/// `errc::corrupt_record` naming the operation for a record that cannot be
/// read.
inline record decode(std::string_view id, std::string_view v) {
  if (!v.empty() && v[0] == record_format) {
    record r;
    if (record_text::reader(v.substr(1)).record(r)) {
      r.info.id = id;
      return r;
    }
  }
  return decode_described(id, v); // an older form, another shape, or one that throws
}

} // namespace troupe::effects::detail
