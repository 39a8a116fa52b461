#pragma once

// An owner's confirmation of an outcome a dispatcher reported, and the
// outbox records it marks confirmed (their retention may then run out).

#include <troupe/delivery/delivery_id.hpp>
#include <troupe/effects/detail/outbox.hpp>
#include <troupe/persistence/journal.hpp>
#include <troupe/persistence/records.hpp>

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <vector>

namespace troupe::effects::detail {

/// What an outcome's delivery ID names: the operation, the round, the
/// status reported.
struct outcome_parts {
  std::string id;
  std::uint32_t round = 0;
  std::string status;
};

/// The parts of an outcome's delivery ID (`delivery_id::of(id, round,
/// status)`), none for another delivery's ID.
inline std::optional<outcome_parts> outcome_of(const delivery::delivery_id& d) {
  std::vector<std::string> parts(1);
  const auto& s = d.str();
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size())
      parts.back() += s[++i];
    else if (s[i] == ':')
      parts.emplace_back();
    else
      parts.back() += s[i];
  }
  if (parts.size() != 3) return std::nullopt;
  try {
    return outcome_parts{std::move(parts[0]), static_cast<std::uint32_t>(std::stoul(parts[1])), std::move(parts[2])};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

/// On the journal's thread: the writes that mark `confirmed`'s records
/// confirmed, for those still finished in the round and status that was
/// reported. A record that cannot be read is left as it is.
inline std::vector<persistence::table_write> confirmation_marks(persistence::journal& j, persistence::table outbox,
                                                                const std::vector<outcome_parts>& confirmed) {
  std::vector<persistence::table_write> out;
  for (const auto& c : confirmed) {
    const auto key = outbox_key(c.id);
    try {
      std::optional<std::string> v;
      if (j.get(outbox, key, v) || !v) continue;
      auto r = decode(c.id, *v);
      if (r.info.round != c.round || to_string(r.info.status) != c.status || r.confirmed ||
          r.info.status == effect_status::pending)
        continue;
      r.confirmed = true;
      out.push_back(persistence::table_write::put(outbox, key, encode(r)));
    } catch (const std::exception&) {
    }
  }
  return out;
}

} // namespace troupe::effects::detail
