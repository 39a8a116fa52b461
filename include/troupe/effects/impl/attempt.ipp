#pragma once

// The definition of `detail::attempt` (troupe/effects/detail/attempt.hpp):
// a coroutine of no user type, compiled once with TROUPE_SEPARATE_COMPILATION.

#include <troupe/effects/detail/attempt.hpp>

namespace troupe::effects::detail {

TROUPE_DECL task<> attempt(std::shared_ptr<shared_part> sh, record rec, bool reread) {
  result res;
  res.rec = std::move(rec);
  auto& r = res.rec;
  bool executing = false;
  try {
    if (reread) {
      auto& j = *sh->journal;
      const auto key = outbox_key(r.info.id);
      // From memory when the store can (the record was mostly just
      // written), else on the blocking thread.
      std::optional<std::string> v;
      if (!j.try_get(sh->outbox, key, v)) {
        auto read = j.async_run([&j, &sh, &key] {
          std::optional<std::string> out;
          if (auto ec = j.get(sh->outbox, key, out)) throw error(ec, "reading outbox record " + key.substr(1));
          return out;
        });
        v = co_await std::move(read);
      }
      if (!v) {
        res.kind = result::what::gone;
        sh->post(std::move(res));
        co_return;
      }
      auto fresh = decode(r.info.id, *v);
      if (fresh.info.status != effect_status::pending) {
        res.kind = result::what::stale;
        r = std::move(fresh);
        sh->post(std::move(res));
        co_return;
      }
      // What this dispatcher knows to be in doubt stays so (an attempt
      // of an earlier process may have been cut short).
      fresh.info.in_doubt = fresh.info.in_doubt || r.info.in_doubt;
      r = std::move(fresh);
    }
    const auto* a = sh->adapters.find(r.info.type);
    if (!a) {
      res.kind = result::what::no_adapter;
    } else if (r.info.in_doubt && a->can_query) {
      res.kind = result::what::queried;
      auto ask = a->query(r.info.id);
      res.answer = co_await std::move(ask);
    } else if (r.info.in_doubt && !a->idempotent) {
      res.kind = result::what::unresolvable;
    } else {
      if (!a->idempotent) {
        // Running it twice would do it twice: say durably, before it runs,
        // that it may have run, so that every later reader of the record
        // (a restart, another dispatcher) asks first (queryable) or leaves
        // it to an operator (not queryable) instead of running it blind.
        auto mark = r;
        mark.info.in_doubt = true;
        mark.info.attempts += 1;
        std::vector<persistence::table_write> t;
        t.push_back(persistence::table_write::put(sh->outbox, outbox_key(r.info.id), encode(mark)));
        auto write = sh->journal->async_write(std::string(), std::vector<persistence::event_record>(), std::move(t),
                                              asio::experimental::as_tuple(asio::use_awaitable));
        auto [ec] = co_await std::move(write);
        if (ec) {
          res.kind = result::what::mark_failed;
          sh->post(std::move(res));
          co_return;
        }
      }
      res.kind = result::what::executed;
      executing = true;
      operation op{r.info.id, r.info.type, r.request, r.info.owner, r.info.attempts + 1};
      auto run = a->execute(std::move(op));
      res.out = co_await std::move(run);
    }
  } catch (const std::exception& ex) {
    if (executing)
      res.out = outcome::unknown(std::string("the adapter threw: ") + ex.what());
    else if (res.kind == result::what::queried)
      res.answer = query_result::unknown(std::string("the query threw: ") + ex.what());
    else
      res.kind = result::what::mark_failed; // nothing was executed
  }
  // What the external system (or an exception) said goes into JSON: as
  // valid UTF-8, or the record could not be read back.
  res.out.detail = troupe::detail::valid_utf8(std::move(res.out.detail));
  res.answer.detail = troupe::detail::valid_utf8(std::move(res.answer.detail));
  sh->post(std::move(res));
}

} // namespace troupe::effects::detail
