#pragma once

// JSON text of user types (events, messages, replies, requests) with as few
// heap allocations as the conversion allows.

#include <boost/json.hpp>

#include <string>
#include <string_view>

namespace troupe::detail {

/// `boost::json::serialize(boost::json::value_from(x))`, the intermediate
/// value's objects, arrays and strings in a stack buffer (values of more
/// than a few KiB take the rest from the heap). Only the text leaves, so
/// nothing can refer to the buffer afterwards. Throws what `value_from`
/// throws.
template <class T>
std::string to_json_text(const T& x) {
  unsigned char buffer[4096];
  boost::json::monotonic_resource memory(buffer, sizeof buffer);
  const auto v = boost::json::value_from(x, boost::json::storage_ptr(&memory));
  return boost::json::serialize(v);
}

/// `boost::json::value_to<T>(boost::json::parse(text))`. The parsed value
/// uses the default (heap) storage: a `T` may hold JSON values (a
/// `boost::json::object` member, say), which share it. Throws
/// `boost::system::system_error` for text that does not parse, and what
/// `value_to` throws for a value that does not convert.
template <class T>
T from_json_text(std::string_view text) {
  return boost::json::value_to<T>(boost::json::parse(text));
}

} // namespace troupe::detail
