#pragma once

/// \file
/// JSON text of user types (events, snapshots, messages, replies, effect
/// requests) through Boost.JSON's conversions: `tag_invoke`
/// (`value_from_tag` / `value_to_tag`), or a type described with
/// Boost.Describe (`BOOST_DESCRIBE_STRUCT`), which needs no code at all.

#include <boost/json.hpp>

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

} // namespace troupe::persistence
