#pragma once

// An adapter behind a uniform, asynchronous interface.

#include <troupe/task.hpp>
#include <troupe/effects/retry_policy.hpp>

#include <functional>
#include <string>

namespace troupe::effects {
struct operation;
struct outcome;
struct query_result;
} // namespace troupe::effects

namespace troupe::effects::detail {

struct erased_adapter {
  retry_policy policy;
  bool can_query = false;
  bool idempotent = false;
  std::function<task<outcome>(operation)> execute;
  std::function<task<query_result>(std::string)> query;
};

} // namespace troupe::effects::detail
