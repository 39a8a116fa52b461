#pragma once

/// \file
/// `troupe::effects::dispatcher`: executes the outbox's pending effects
/// through adapters, resolves unknown outcomes, retries, and reports each
/// outcome to the effect's owner by reliable delivery. See docs/effects.md.

#include <troupe/actor_system.hpp>
#include <troupe/context.hpp>
#include <troupe/error.hpp>
#include <troupe/task.hpp>
#include <troupe/delivery/reliable_actor.hpp>
#include <troupe/effects/adapter.hpp>
#include <troupe/effects/effect.hpp>
#include <troupe/effects/outbox.hpp>
#include <troupe/persistence/journal.hpp>
#include <troupe/detail/stored_handler.hpp>

#include <asio/async_result.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace troupe::effects {

class dispatcher;

namespace detail {

inline std::int64_t now_ms() { return delivery::detail::now_ms(); }

/// An adapter behind a uniform, asynchronous interface.
struct erased_adapter {
  retry_policy policy;
  bool can_query = false;
  bool idempotent = false;
  std::function<task<outcome>(operation)> execute;
  std::function<task<query_result>(std::string)> query;
};

template <class A>
task<outcome> run_execute(std::shared_ptr<A> a, operation op) {
  if constexpr (troupe::detail::awaitable_traits<decltype(a->execute(op))>::is_awaitable)
    co_return co_await a->execute(op);
  else
    co_return a->execute(op);
}

template <class A>
task<query_result> run_query(std::shared_ptr<A> a, std::string id) {
  if constexpr (troupe::detail::awaitable_traits<decltype(a->query(id))>::is_awaitable)
    co_return co_await a->query(id);
  else
    co_return a->query(id);
}

/// Which operation IDs are being executed, per store, in this process: two
/// dispatchers on one store never run the same ID at once (another process
/// cannot open the store while this one has it).
class claims {
public:
  static std::shared_ptr<claims> of(const persistence::journal* j) {
    static std::mutex m;
    static std::map<const persistence::journal*, std::weak_ptr<claims>> all;
    std::lock_guard g(m);
    for (auto it = all.begin(); it != all.end();) it = it->second.expired() ? all.erase(it) : std::next(it);
    auto& w = all[j];
    auto c = w.lock();
    if (!c) w = c = std::make_shared<claims>();
    return c;
  }

  bool try_claim(const std::string& id) {
    std::lock_guard g(m_);
    return held_.insert(id).second;
  }
  void release(const std::string& id) {
    std::lock_guard g(m_);
    held_.erase(id);
  }
  void join() {
    std::lock_guard g(m_);
    ++dispatchers_;
  }
  void leave() {
    std::lock_guard g(m_);
    --dispatchers_;
  }
  /// More than one dispatcher on the store: each re-reads a record after
  /// claiming it (another may have finished it).
  bool shared() {
    std::lock_guard g(m_);
    return dispatchers_ > 1;
  }

private:
  std::mutex m_;
  std::unordered_set<std::string> held_;
  int dispatchers_ = 0;
};

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
  std::map<std::string, erased_adapter, std::less<>> adapters;
  std::shared_ptr<persistence::journal> journal;
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

/// A journal read or write, awaited from a coroutine.
inline task<std::optional<std::string>> read_record(std::shared_ptr<persistence::journal> j, std::string key) {
  std::optional<std::string> out;
  std::error_code ec;
  co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(
      [&](auto handler) {
        j->run_blocking([&, h = troupe::detail::stored_handler<decltype(handler)>(std::move(handler))]() mutable {
          ec = j->get(persistence::table::outbox, key, out);
          h.post();
        });
      },
      asio::use_awaitable);
  if (ec) throw error(errc::storage_failure, "reading outbox record " + key.substr(1) + ": " + ec.message());
  co_return out;
}

inline task<std::error_code> write_tables(std::shared_ptr<persistence::journal> j, std::vector<persistence::table_write> t) {
  constexpr auto token = asio::experimental::as_tuple(asio::use_awaitable);
  auto [ec] = co_await asio::async_initiate<decltype(token), void(std::error_code)>(
      [&](auto handler) {
        j->write({}, {}, std::move(t),
                 [h = troupe::detail::stored_handler<decltype(handler)>(std::move(handler))](std::error_code e) mutable {
                   h.post(e);
                 });
      },
      token);
  co_return ec;
}

/// One attempt, off the dispatcher's mailbox (it touches nothing of the
/// dispatcher but `sh`).
inline task<> attempt(std::shared_ptr<shared_part> sh, record rec, bool reread) {
  result res;
  res.rec = std::move(rec);
  auto& r = res.rec;
  bool executing = false;
  try {
    if (reread) {
      auto read = read_record(sh->journal, outbox_key(r.info.id));
      auto v = co_await std::move(read);
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
      r = std::move(fresh);
    }
    auto it = sh->adapters.find(r.info.type);
    if (it == sh->adapters.end()) {
      res.kind = result::what::no_adapter;
    } else if (auto& a = it->second; r.info.in_doubt && a.can_query) {
      res.kind = result::what::queried;
      auto ask = a.query(r.info.id);
      res.answer = co_await std::move(ask);
    } else if (r.info.in_doubt && !a.idempotent) {
      res.kind = result::what::unresolvable;
    } else {
      if (!a.can_query && !a.idempotent) {
        // Nothing could tell afterwards whether this attempt ran: say
        // durably, before it runs, that it may have.
        auto mark = r;
        mark.info.in_doubt = true;
        mark.info.attempts += 1;
        std::vector<persistence::table_write> t;
        t.push_back(persistence::table_write::put(persistence::table::outbox, outbox_key(r.info.id), encode(mark)));
        auto write = write_tables(sh->journal, std::move(t));
        if (co_await std::move(write)) {
          res.kind = result::what::mark_failed;
          sh->post(std::move(res));
          co_return;
        }
      }
      res.kind = result::what::executed;
      executing = true;
      operation op{r.info.id, r.info.type, r.request, r.info.owner, r.info.attempts + 1};
      auto run = a.execute(std::move(op));
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
  sh->post(std::move(res));
}

/// Told to the dispatcher by an owner once an effect's intent is durable.
struct enqueued {
  record rec;
};
struct tick {};
struct results_ready {};
struct sweep {};

struct dispatcher_state {};

} // namespace detail

/// The adapters of a dispatcher, by effect type.
class adapters {
public:
  /// Performs the effects whose request type has `effect_type == type`.
  template <adapter A>
  adapters& add(std::string type, std::shared_ptr<A> a, retry_policy policy = {}) {
    if (type.empty()) throw error(errc::invalid_argument, "adapters::add: the effect type is empty");
    if (!a) throw error(errc::invalid_argument, "adapters::add: the adapter for '" + type + "' is null");
    if (policy.max_attempts == 0 || policy.initial_backoff.count() <= 0 || policy.max_backoff < policy.initial_backoff)
      throw error(errc::invalid_argument, "adapters::add: the retry policy for '" + type +
                                              "' needs max_attempts >= 1 and 0 < initial_backoff <= max_backoff");
    detail::erased_adapter e;
    e.policy = std::move(policy);
    e.can_query = queryable_adapter<A>;
    e.idempotent = honours_idempotency_keys<A>();
    e.execute = [a](operation op) { return detail::run_execute(a, std::move(op)); };
    if constexpr (queryable_adapter<A>) e.query = [a](std::string id) { return detail::run_query(a, std::move(id)); };
    if (!by_type_.emplace(type, std::move(e)).second)
      throw error(errc::invalid_argument, "adapters::add: an adapter for '" + type + "' is already registered");
    return *this;
  }

  template <adapter A>
  adapters& add(std::string type, A a, retry_policy policy = {}) {
    return add(std::move(type), std::make_shared<A>(std::move(a)), std::move(policy));
  }

private:
  friend class dispatcher;
  std::map<std::string, detail::erased_adapter, std::less<>> by_type_;
};

struct dispatcher_options {
  /// The dispatcher's persistence ID and name on the delivery transport.
  std::string name = "troupe.effects";
  /// Attempts running at once, at most.
  std::size_t max_in_flight = 64;
  /// How often due retries are looked for.
  std::chrono::milliseconds tick{50};
  retention_policy retention;
  /// For the outcomes delivered to owners (`wait_when_full` is forced on:
  /// the dispatcher waits rather than drop an outcome).
  delivery::delivery_options delivery;
};

// -- operator API: ask these of a dispatcher ---------------------------------------

/// → `std::vector<effect_info>`: the failed and unknown effects (and the
/// pending ones with `pending`).
struct list_effects {
  bool pending = false;
};
/// → `bool` (false: no failed or unknown effect has that ID): the effect is
/// pending again (a new round, attempts counted from zero) and runs at
/// once. An unknown one is first queried if its adapter can; otherwise it
/// is executed again with the same key — the operator's decision.
struct requeue_effect {
  std::string id;
};
/// → `bool` (false: no unknown effect has that ID): an operator, having
/// checked the external system, says what an unknown effect came to.
struct resolve_effect {
  std::string id;
  bool completed = false;
  /// The result (JSON text) if completed, the reason if not.
  std::string detail;
};
/// → `dispatcher_stats`.
struct effects_status {};

struct dispatcher_stats {
  std::size_t pending = 0, running = 0, failed = 0, unknown = 0;
  /// Since the dispatcher (re)started.
  std::uint64_t executed = 0, queried = 0, completed = 0, removed = 0, write_retries = 0;
};

namespace detail {
struct dispatcher_slot {
  actor_ref<dispatcher> ref;
};
} // namespace detail

/// Executes effects from the outbox. One per actor system is the usual
/// setup (`spawn_dispatcher`); several on one store never run the same
/// operation ID at once.
///
/// An effect is *claimed* before each attempt and released once its result
/// is durable. Attempts run concurrently (`max_in_flight`), off the
/// mailbox; their results are written in batches: the outbox record's new
/// state and, for an outcome, its delivery to the owner, atomically.
class dispatcher : public delivery::reliable_actor<dispatcher, detail::dispatcher_state> {
  using base = delivery::reliable_actor<dispatcher, detail::dispatcher_state>;

public:
  using events = persistence::event_types<>;

  dispatcher(context<dispatcher> ctx, effects::adapters a, dispatcher_options o = {})
      : base(ctx, persistence::persistence_id{o.name}, delivery_options_of(o)), ctx_(ctx), options_(std::move(o)) {
    if (options_.max_in_flight == 0 || options_.tick.count() <= 0)
      throw error(errc::invalid_argument, "dispatcher " + options_.name + ": max_in_flight and tick must be positive");
    if (options_.retention.sweep_interval.count() <= 0 || options_.retention.sweep_batch == 0)
      throw error(errc::invalid_argument,
                  "dispatcher " + options_.name + ": retention sweep_interval and sweep_batch must be positive");
    shared_ = std::make_shared<detail::shared_part>();
    shared_->adapters = std::move(a.by_type_);
    shared_->journal = this->storage_ptr();
    shared_->held = detail::claims::of(shared_->journal.get());
    shared_->held->join();
    auto self = ctx.self();
    shared_->notify = [self] { (void)self.tell(detail::results_ready{}); };
    shared_->kick = [self] { (void)self.tell(detail::tick{}); };
  }

  ~dispatcher() {
    std::vector<std::string> mine;
    {
      std::lock_guard g(shared_->m);
      shared_->closed = true;
      // Results not yet handled: their claims go (the records are in doubt
      // or pending in the store, for the next dispatcher).
      for (auto& r : shared_->results) mine.push_back(r.rec.info.id);
      shared_->results.clear();
    }
    for (auto& id : mine) shared_->held->release(id);
    shared_->held->leave();
  }

  /// Loads the outbox; in-doubt effects are resolved before anything else
  /// is executed.
  task<> on_recovery_completed() {
    std::vector<detail::record> all;
    auto scan = [this, &all] {
      auto ec = this->storage().scan(persistence::table::outbox, "e", [&](std::string_view k, std::string_view v) {
        all.push_back(detail::decode(k.substr(1), v));
        return true;
      });
      if (ec) throw error(errc::storage_failure, "loading the outbox: " + ec.message());
    };
    co_await this->on_journal_thread(scan);
    const auto now = detail::now_ms();
    for (auto& r : all) {
      const auto id = r.info.id;
      switch (r.info.status) {
      case effect_status::pending: {
        // An attempt may have been cut short by the restart: where the
        // system can be asked, ask before executing.
        if (auto a = adapter_of(r.info.type); a && a->can_query) r.info.in_doubt = true;
        if (r.info.in_doubt) {
          r.due_ms = now;
          first_.insert(id);
        }
        add_open(std::move(r));
        break;
      }
      case effect_status::completed:
        expire_later(r);
        break;
      case effect_status::failed:
        expire_later(r);
        stuck_[id] = std::move(r);
        break;
      default:
        stuck_[id] = std::move(r);
        break;
      }
    }
    ctx_.schedule_every(options_.tick, detail::tick{});
    ctx_.schedule_every(options_.retention.sweep_interval, detail::sweep{});
    kick();
  }

  void handle(detail::enqueued e) {
    const auto id = e.rec.info.id;
    if (open_.contains(id) || stuck_.contains(id)) return;
    e.rec.due_ms = detail::now_ms();
    add_open(std::move(e.rec));
    kick();
  }

  void handle(detail::tick) { kick(); }

  task<> handle(detail::results_ready) {
    auto batch = shared_->take();
    if (batch.empty()) co_return;
    std::vector<plan> plans;
    plans.reserve(batch.size());
    std::vector<persistence::table_write> tables;
    this->begin_batch();
    try {
      for (auto& r : batch) {
        plans.push_back(decide(r));
        auto& p = plans.back();
        if (!p.write) continue;
        tables.push_back(persistence::table_write::put(persistence::table::outbox, detail::outbox_key(p.rec.info.id),
                                                       detail::encode(p.rec)));
        if (p.update) co_await report(p.rec.info.owner, *p.update);
      }
    } catch (...) {
      this->abort_batch();
      retry_later(std::move(batch));
      co_return;
    }
    try {
      co_await this->commit_batch(std::move(tables));
    } catch (...) {
      retry_later(std::move(batch));
      co_return;
    }
    for (auto& p : plans) settle(std::move(p));
    kick();
  }

  task<> handle(detail::sweep) {
    const auto now = detail::now_ms();
    std::vector<persistence::table_write> tables;
    while (!expiry_.empty() && expiry_.begin()->first <= now && tables.size() < options_.retention.sweep_batch) {
      auto [at, id] = *expiry_.begin();
      expiry_.erase(expiry_.begin());
      if (open_.contains(id)) continue; // re-queued since
      if (auto it = stuck_.find(id); it != stuck_.end()) {
        if (it->second.info.status != effect_status::failed) continue; // unknown: kept for an operator
        stuck_.erase(it);
      }
      tables.push_back(persistence::table_write::erase(persistence::table::outbox, detail::outbox_key(id)));
    }
    if (tables.empty()) co_return;
    const auto n = tables.size();
    co_await this->persist_all_with(std::move(tables));
    stats_.removed += n;
  }

  std::vector<effect_info> handle(list_effects q) const {
    std::vector<effect_info> out;
    for (auto& [id, r] : stuck_) out.push_back(r.info);
    if (q.pending)
      for (auto& [id, s] : open_) out.push_back(s.rec.info);
    return out;
  }

  task<bool> handle(requeue_effect q) {
    auto it = stuck_.find(q.id);
    if (it == stuck_.end()) co_return false;
    auto r = it->second;
    const auto now = detail::now_ms();
    const auto* a = adapter_of(r.info.type);
    r.info.in_doubt = r.info.status == effect_status::unknown && a && a->can_query;
    r.info.status = effect_status::pending;
    r.info.round += 1;
    r.info.attempts = 0;
    r.info.queries = 0;
    r.info.finished_ms = 0;
    r.info.result.clear();
    r.info.reason.clear();
    r.due_ms = now;
    r.note(now, "operator", "requeued", "round " + std::to_string(r.info.round));
    co_await write_with_update(r);
    stuck_.erase(q.id);
    add_open(std::move(r));
    kick();
    co_return true;
  }

  task<bool> handle(resolve_effect q) {
    auto it = stuck_.find(q.id);
    if (it == stuck_.end() || it->second.info.status != effect_status::unknown) co_return false;
    auto r = it->second;
    const auto now = detail::now_ms();
    r.note(now, "operator", q.completed ? "completed" : "failed", q.detail);
    finish(r, q.completed ? effect_status::completed : effect_status::failed, q.detail, now);
    co_await write_with_update(r);
    stuck_.erase(q.id);
    if (r.info.status == effect_status::failed) stuck_[q.id] = r;
    expire_later(r);
    co_return true;
  }

  dispatcher_stats handle(effects_status) const {
    auto s = stats_;
    s.pending = open_.size();
    s.running = in_flight_;
    for (auto& [id, r] : stuck_) (r.info.status == effect_status::failed ? s.failed : s.unknown) += 1;
    return s;
  }

private:
  struct slot {
    detail::record rec;
    bool running = false;
  };

  /// What a result changes.
  struct plan {
    detail::record rec;
    detail::result::what kind{};
    bool write = true;
    bool drop = false; // no longer this dispatcher's concern
    bool threshold = false;
    std::optional<effect_updated> update;
  };

  static delivery::delivery_options delivery_options_of(const dispatcher_options& o) {
    auto d = o.delivery;
    d.redelivery.wait_when_full = true;
    return d;
  }

  const detail::erased_adapter* adapter_of(std::string_view type) const {
    auto it = shared_->adapters.find(type);
    return it == shared_->adapters.end() ? nullptr : &it->second;
  }

  void add_open(detail::record r) {
    const auto id = r.info.id;
    due_.emplace(r.due_ms, id);
    open_[id] = slot{std::move(r), false};
  }

  void expire_later(const detail::record& r) {
    const auto keep = r.info.status == effect_status::completed ? options_.retention.completed : options_.retention.failed;
    const auto at = keep == std::chrono::milliseconds::max() ? INT64_MAX : r.info.finished_ms + keep.count();
    expiry_.emplace(at, r.info.id);
  }

  /// Starts what is due, the in-doubt effects found at start first.
  void kick() {
    const auto now = detail::now_ms();
    for (auto it = due_.begin(); it != due_.end() && in_flight_ < options_.max_in_flight && it->first <= now;) {
      const auto id = it->second;
      if (!first_.empty() && !first_.contains(id)) {
        ++it;
        continue;
      }
      auto& s = open_.at(id);
      if (!shared_->held->try_claim(id)) {
        // Another dispatcher runs it: look again later.
        it = due_.erase(it);
        s.rec.due_ms = now + options_.tick.count();
        due_.emplace(s.rec.due_ms, id);
        continue;
      }
      it = due_.erase(it);
      s.running = true;
      ++in_flight_;
      asio::co_spawn(ctx_.get_executor(), detail::attempt(shared_, s.rec, shared_->held->shared()), asio::detached);
    }
  }

  void finish(detail::record& r, effect_status s, std::string text, std::int64_t now) {
    r.info.status = s;
    r.info.in_doubt = false;
    r.info.finished_ms = now;
    if (s == effect_status::completed) {
      r.info.result = std::move(text);
      r.info.reason.clear();
    } else {
      r.info.reason = std::move(text);
    }
  }

  static effect_updated update_of(const detail::record& r) {
    return {r.info.id, r.info.status, r.info.result, r.info.reason, r.info.attempts, r.info.round};
  }

  plan decide(detail::result& res) {
    using what = detail::result::what;
    plan p;
    p.kind = res.kind;
    p.rec = res.rec;
    auto& r = p.rec;
    auto& i = r.info;
    const auto now = detail::now_ms();
    const auto* a = adapter_of(i.type);
    const auto& policy = a ? a->policy : retry_policy{};
    auto retry_after = [&](std::chrono::milliseconds d) {
      i.status = effect_status::pending;
      r.due_ms = now + d.count();
    };
    auto give_up = [&](effect_status s, std::string why) {
      finish(r, s, std::move(why), now);
      p.threshold = true;
    };
    switch (res.kind) {
    case what::gone:
      p.write = false;
      p.drop = true;
      return p;
    case what::stale:
      p.write = false;
      return p;
    case what::mark_failed:
      p.write = false;
      retry_after(policy.backoff(i.attempts + 1));
      return p;
    case what::no_adapter:
      r.note(now, "execute", "failed", "no adapter for effect type '" + i.type + "'");
      finish(r, effect_status::failed, "no adapter registered for effect type '" + i.type + "'", now);
      break;
    case what::unresolvable:
      r.note(now, "execute", "unknown", "cannot be resolved");
      finish(r, effect_status::unknown,
             "the outcome of attempt " + std::to_string(i.attempts) +
                 " is unknown (it was interrupted), and the adapter can neither query nor retry with the same key",
             now);
      break;
    case what::executed: {
      ++stats_.executed;
      i.attempts += 1;
      const auto& o = res.out;
      if (o.what == outcome::kind::completed) {
        r.note(now, "execute", "completed", o.detail);
        finish(r, effect_status::completed, o.detail, now);
      } else if (o.what == outcome::kind::failed) {
        r.note(now, "execute", o.permanent ? "refused" : "failed", o.detail);
        i.in_doubt = false;
        if (o.permanent)
          finish(r, effect_status::failed, o.detail, now);
        else if (i.attempts >= policy.max_attempts)
          give_up(effect_status::failed, "gave up after " + std::to_string(i.attempts) + " attempts: " + o.detail);
        else
          retry_after(policy.backoff(i.attempts));
      } else {
        r.note(now, "execute", "unknown", o.detail);
        if (a && (a->can_query || a->idempotent)) {
          i.in_doubt = true;
          if (!a->can_query && i.attempts >= policy.max_attempts)
            give_up(effect_status::unknown,
                    "still unknown after " + std::to_string(i.attempts) + " attempts: " + o.detail);
          else
            retry_after(policy.backoff(i.attempts));
        } else {
          finish(r, effect_status::unknown,
                 o.detail + " (the adapter can neither query nor retry with the same key: an operator must check)", now);
        }
      }
      break;
    }
    case what::queried: {
      ++stats_.queried;
      i.queries += 1;
      const auto& q = res.answer;
      switch (q.what) {
      case query_result::kind::completed:
        r.note(now, "query", "completed", q.detail);
        finish(r, effect_status::completed, q.detail, now);
        break;
      case query_result::kind::failed:
      case query_result::kind::not_found: {
        const bool found = q.what == query_result::kind::failed;
        r.note(now, "query", found ? "failed" : "not_found", q.detail);
        i.in_doubt = false;
        if (i.attempts >= policy.max_attempts)
          give_up(effect_status::failed, "gave up after " + std::to_string(i.attempts) + " attempts" +
                                             (found ? ": " + q.detail : std::string(" (the system never saw it)")));
        else
          retry_after(found ? policy.backoff(i.attempts) : std::chrono::milliseconds(0));
        break;
      }
      case query_result::kind::unknown:
        r.note(now, "query", "unknown", q.detail);
        if (i.queries >= policy.max_attempts)
          give_up(effect_status::unknown, "still unknown after " + std::to_string(i.queries) + " queries: " + q.detail);
        else
          retry_after(policy.backoff(i.queries));
        break;
      }
      break;
    }
    }
    if (i.status != effect_status::pending) p.update = update_of(r);
    return p;
  }

  /// Delivers `u` to the owner; joins the open batch.
  task<> report(const std::string& owner, const effect_updated& u) {
    auto id = delivery::delivery_id::of(u.id, std::to_string(u.round), to_string(u.status));
    effect_update m{u};
    co_await this->deliver(owner, std::move(id), std::move(m));
  }

  /// Writes `r` and reports its state to its owner, atomically.
  task<> write_with_update(const detail::record& r) {
    std::vector<persistence::table_write> tables;
    tables.push_back(
        persistence::table_write::put(persistence::table::outbox, detail::outbox_key(r.info.id), detail::encode(r)));
    this->begin_batch();
    try {
      const auto u = update_of(r);
      co_await report(r.info.owner, u);
    } catch (...) {
      this->abort_batch();
      throw;
    }
    co_await this->commit_batch(std::move(tables));
  }

  /// A batch that could not be written: its results are handled again
  /// after a tick (their claims stay held meanwhile).
  void retry_later(std::vector<detail::result> batch) {
    ++stats_.write_retries;
    shared_->put_back(std::move(batch));
    ctx_.schedule_once(options_.tick, detail::results_ready{});
  }

  /// Once durable: the in-memory view follows the store.
  void settle(plan p) {
    const auto id = p.rec.info.id;
    shared_->held->release(id);
    first_.erase(id);
    --in_flight_;
    auto it = open_.find(id);
    if (p.drop) {
      if (it != open_.end()) open_.erase(it);
      return;
    }
    auto& r = p.rec;
    if (r.info.status == effect_status::pending) {
      if (it == open_.end()) return;
      it->second.rec = std::move(r);
      it->second.running = false;
      due_.emplace(it->second.rec.due_ms, id);
      return;
    }
    if (it != open_.end()) open_.erase(it);
    if (r.info.status == effect_status::completed && p.kind != detail::result::what::stale) ++stats_.completed;
    if (r.info.status != effect_status::completed) stuck_[id] = r;
    if (r.info.status != effect_status::unknown) expire_later(r);
    if (p.threshold)
      if (const auto* a = adapter_of(r.info.type); a && a->policy.on_threshold) a->policy.on_threshold(r.info);
  }

  context<dispatcher> ctx_;
  dispatcher_options options_;
  std::shared_ptr<detail::shared_part> shared_;
  std::unordered_map<std::string, slot> open_;            // pending
  std::set<std::pair<std::int64_t, std::string>> due_;    // pending, not running, by due time
  std::unordered_set<std::string> first_;                 // in doubt at start: resolved first
  std::map<std::string, detail::record> stuck_;            // failed and unknown
  std::multimap<std::int64_t, std::string> expiry_;       // completed and failed, by removal time
  std::size_t in_flight_ = 0;
  dispatcher_stats stats_;
};

/// Spawns a dispatcher in `sys`; the first one spawned is the one effect
/// owners of `sys` notify. Needs a journal and a delivery transport
/// attached to `sys`.
inline actor_ref<dispatcher> spawn_dispatcher(actor_system& sys, adapters a, dispatcher_options o = {}) {
  auto ref = sys.spawn<dispatcher>(std::move(a), std::move(o));
  if (!sys.extension<detail::dispatcher_slot>())
    sys.set_extension(std::make_shared<detail::dispatcher_slot>(detail::dispatcher_slot{ref}));
  return ref;
}

} // namespace troupe::effects
