#pragma once

/// \file
/// JSON text of user types (events, snapshots, messages, replies, effect
/// requests) through Boost.JSON's conversions: `tag_invoke`
/// (`value_from_tag` / `value_to_tag`), or a type described with
/// Boost.Describe (`BOOST_DESCRIBE_STRUCT`), which needs no code at all.

#include <boost/json.hpp>

#include <charconv>
#include <cmath>
#include <string>
#include <string_view>

namespace troupe::persistence {

/// `boost::json::serialize(boost::json::value_from(x))`, with the
/// intermediate value's objects, arrays and strings in a stack buffer
/// (values of more than a few KiB take the rest from the heap). Only the
/// text leaves, so nothing can refer to the buffer afterwards. Throws what
/// `value_from` throws.
template <class T>
std::string to_json_text(const T& x) {
  unsigned char buffer[4096];
  boost::json::monotonic_resource memory(buffer, sizeof buffer);
  const auto v = boost::json::value_from(x, boost::json::storage_ptr(&memory));
  return boost::json::serialize(v);
}

/// How troupe reads the JSON text it wrote: a string's bytes come back as
/// they were written, UTF-8 or not. (Boost.JSON writes a string's bytes as
/// they are, and by default refuses to read text that is not UTF-8: a value
/// holding a binary string or Latin-1 text would be stored and then never
/// read again.)
inline boost::json::parse_options json_text_options() {
  boost::json::parse_options o;
  o.allow_invalid_utf8 = true;
  return o;
}

/// `boost::json::value_to<T>(boost::json::parse(text))`, strings read as
/// the bytes written (`json_text_options`). The parsed value uses the
/// default (heap) storage: a `T` may hold JSON values (a
/// `boost::json::object` member, say), which share it. Throws
/// `boost::system::system_error` for text that does not parse, and what
/// `value_to` throws for a value that does not convert.
template <class T>
T from_json_text(std::string_view text) {
  return boost::json::value_to<T>(boost::json::parse(text, {}, json_text_options()));
}

/// A type whose values convert to and from JSON through Boost.JSON.
template <class T>
concept json_convertible = boost::json::has_value_from<T>::value && boost::json::has_value_to<T>::value;

/// `v` as JSON text, as `boost::json::serialize` writes it but for
/// floating-point numbers, written as plain decimals (`0.0967`, `516.85`)
/// in their shortest exact form instead of in exponent form
/// (`9.67E-2`): for what people and shell scripts read, such as a CLI's
/// summary line. A number JSON cannot hold (an infinity, NaN) is `null`.
inline void to_plain_json(const boost::json::value& v, std::string& out) {
  switch (v.kind()) {
  case boost::json::kind::double_: {
    const double d = v.get_double();
    if (!std::isfinite(d)) {
      out += "null";
      return;
    }
    char buf[400]; // (fixed notation of the largest double: 309 digits)
    auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::fixed);
    out.append(buf, r.ptr);
    return;
  }
  case boost::json::kind::array: {
    out += '[';
    bool first = true;
    for (const auto& e : v.get_array()) {
      if (!first) out += ',';
      first = false;
      to_plain_json(e, out);
    }
    out += ']';
    return;
  }
  case boost::json::kind::object: {
    out += '{';
    bool first = true;
    for (const auto& [k, e] : v.get_object()) {
      if (!first) out += ',';
      first = false;
      out += boost::json::serialize(boost::json::string_view(k));
      out += ':';
      to_plain_json(e, out);
    }
    out += '}';
    return;
  }
  default: out += boost::json::serialize(v); return;
  }
}

inline std::string to_plain_json(const boost::json::value& v) {
  std::string out;
  to_plain_json(v, out);
  return out;
}

} // namespace troupe::persistence
