#pragma once

/// \file
/// `troupe::persistence::persistence_id`: the name of one persistent
/// actor's journal.

#include <string>

namespace troupe::persistence {

/// Names the journal of one persistent actor (1 to 65,535 bytes).
struct persistence_id {
  std::string value;
};

} // namespace troupe::persistence

namespace troupe {
using persistence::persistence_id;
} // namespace troupe
