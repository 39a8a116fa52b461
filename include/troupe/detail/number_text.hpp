#pragma once

// A finite number as text for metrics (Prometheus and JSON alike): an
// integer as an integer, anything else in its shortest exact form.

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

namespace troupe::detail {

inline void append_finite_number(std::string& out, double v) {
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 9.007199254740992e15) {
    auto r = std::to_chars(buf, buf + sizeof buf, static_cast<std::int64_t>(v));
    out.append(buf, r.ptr);
    return;
  }
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

} // namespace troupe::detail
