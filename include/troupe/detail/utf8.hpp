#pragma once

// Text from outside (an external system's answer, an exception's message)
// made valid UTF-8 before it goes into JSON: every byte that does not start
// or continue a well-formed sequence becomes U+FFFD.

#include <cstddef>
#include <string>
#include <string_view>

namespace troupe::detail {

/// The length of the well-formed UTF-8 sequence at the start of `s`, or 0.
inline std::size_t utf8_sequence(std::string_view s) noexcept {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF; // the second byte's range (no overlongs, surrogates or > U+10FFFF)
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() < n || b(1) < lo || b(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i)
    if (b(i) < 0x80 || b(i) > 0xBF) return 0;
  return n;
}

/// `s`, with each byte that is not part of a well-formed sequence replaced.
inline std::string valid_utf8(std::string s) {
  std::string_view v(s);
  std::size_t i = 0;
  for (; i < v.size(); ++i) // the common case: nothing to replace, no copy
    if (static_cast<unsigned char>(v[i]) >= 0x80) break;
  if (i == v.size()) return s;
  std::string out(v.substr(0, i));
  while (i < v.size()) {
    if (const auto n = utf8_sequence(v.substr(i))) {
      out.append(v.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

} // namespace troupe::detail
