#pragma once

// One attempt at an effect, off the dispatcher's mailbox: execute, query,
// or find that nothing can be done; the result goes back to the dispatcher.

#include <troupe/error.hpp>
#include <troupe/task.hpp>
#include <troupe/detail/compile_mode.hpp>
#include <troupe/effects/adapter.hpp>
#include <troupe/effects/effect.hpp>
#include <troupe/effects/detail/claims.hpp>
#include <troupe/effects/detail/erased_adapter.hpp>
#include <troupe/effects/detail/outbox.hpp>
#include <troupe/detail/utf8.hpp>
#include <troupe/persistence/journal.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/detail/unique_function.hpp>

#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>

#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace troupe::effects::detail {

/// What one attempt came to, for the dispatcher's thread.
struct result {
  enum class what : std::uint8_t { executed, queried, unresolvable, stale, gone, mark_failed, no_adapter };
  result::what kind = what::gone;
  record rec; // as the attempt saw it (or, if stale, as it is now)
  outcome out;
  query_result answer;
};

/// Shared by a dispatcher and its running attempts, which may outlive it.
struct shared_part {
  effects::adapters adapters;
  std::shared_ptr<persistence::journal> journal;
  persistence::table outbox;
  std::shared_ptr<claims> held;
  troupe::detail::unique_function<void()> notify; // tells the dispatcher: results are ready
  troupe::detail::unique_function<void()> kick;   // tells it to look for due work

  std::mutex m;
  std::vector<result> results;
  bool closed = false;

  void post(result r) {
    bool first = false;
    {
      std::lock_guard g(m);
      if (closed) {
        // The dispatcher that started it stopped: its successor will find
        // the record (in doubt) and claim it once released here.
        held->release(r.rec.info.id);
        if (kick) kick();
        return;
      }
      first = results.empty();
      results.push_back(std::move(r));
    }
    if (first) notify();
  }

  std::vector<result> take() {
    std::lock_guard g(m);
    return std::exchange(results, {});
  }

  void put_back(std::vector<result> rs) {
    std::lock_guard g(m);
    for (auto& r : results) rs.push_back(std::move(r));
    results = std::move(rs);
  }
};

/// One attempt (it touches nothing of the dispatcher but `sh`). `reread`:
/// read the record again first (another dispatcher may have finished it).
TROUPE_DECL task<> attempt(std::shared_ptr<shared_part> sh, record rec, bool reread);

} // namespace troupe::effects::detail

#if defined(TROUPE_HEADER_ONLY)
#include <troupe/effects/impl/attempt.ipp>
#endif
