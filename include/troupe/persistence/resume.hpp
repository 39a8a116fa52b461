#pragma once

/// \file
/// `troupe::persistence::resume`: after a restart, activates the entities
/// that have unfinished work (`work_index`) — and no others.

#include <troupe/entity.hpp>
#include <troupe/persistence/journal.hpp>
#include <troupe/persistence/work_index.hpp>
#include <troupe/detail/stored_handler.hpp>

#include <asio/async_result.hpp>
#include <asio/use_awaitable.hpp>

#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace troupe::persistence {

/// Activates every entity of `region` whose persistence ID starts with
/// `prefix` and has a mark in `j`'s work index (telling it `resumed`), and
/// completes once each has recovered and handled it, with how many there
/// were: an Asio initiating function with signature
/// `void(std::exception_ptr, std::size_t)`. The index is read on the
/// journal's blocking thread; an entity whose activation fails fails the
/// whole (the others are still activated).
///
/// \code
/// auto orders = sys.entities<order>(troupe::entity_options{});
/// std::size_t n = tp::resume(*journal, orders, "order-", asio::use_future).get();
/// \endcode
template <class T, class Token = asio::use_awaitable_t<>>
auto resume(journal& j, entity_region<T> region, std::string prefix, Token&& token = Token{}) {
  return asio::async_initiate<Token, void(std::exception_ptr, std::size_t)>(
      [&j](auto handler, entity_region<T> region, std::string prefix) {
        using H = troupe::detail::stored_handler<decltype(handler)>;
        struct state {
          explicit state(H h) : handler(std::move(h)) {}
          H handler;
          std::mutex m;
          std::size_t left = 0, total = 0;
          std::exception_ptr failure;
          void done(std::exception_ptr ep) {
            std::unique_lock l(m);
            if (ep && !failure) failure = ep;
            if (--left != 0) return;
            l.unlock();
            handler.post(failure, total);
          }
        };
        auto s = std::make_shared<state>(H(std::move(handler)));
        j.run_blocking([&j, s, region = std::move(region), prefix = std::move(prefix)]() mutable {
          std::vector<std::string> ids;
          try {
            ids = work_index(j).marked(j, prefix);
          } catch (...) {
            s->handler.post(std::current_exception(), std::size_t{0});
            return;
          }
          {
            std::lock_guard g(s->m);
            s->total = ids.size();
            s->left = ids.size() + 1; // one for this loop, done below
          }
          for (auto& id : ids)
            region.get(std::move(id)).ask(resumed{}, [s](std::exception_ptr ep) { s->done(std::move(ep)); });
          s->done(nullptr);
        });
      },
      token, std::move(region), std::move(prefix));
}

} // namespace troupe::persistence
