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
#include <troupe/effects/dispatcher_options.hpp>
#include <troupe/effects/effect.hpp>
#include <troupe/effects/effect_info.hpp>
#include <troupe/effects/operator.hpp>
#include <troupe/effects/detail/attempt.hpp>
#include <troupe/effects/detail/claims.hpp>
#include <troupe/effects/detail/decide.hpp>
#include <troupe/effects/detail/outbox.hpp>
#include <troupe/persistence/journal.hpp>
#include <troupe/detail/clock.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace troupe::effects {

class dispatcher;

namespace detail {

/// Told to the dispatcher by an owner once an effect's intent is durable.
struct enqueued {
  record rec;
};
struct tick {};
struct results_ready {};
struct sweep {};

struct dispatcher_state {};

/// The dispatcher effect owners of a system notify (`spawn_dispatcher`).
struct dispatcher_slot {
  actor_ref<dispatcher> ref;
};

} // namespace detail

/// Executes effects from the outbox. One per actor system is the usual
/// setup (`spawn_dispatcher`); several in one system never run the same
/// operation ID at once.
///
/// An effect is *claimed* before each attempt and released once its result
/// is durable. Attempts run concurrently (`max_in_flight`), off the
/// mailbox; their results are written in batches: the outbox record's new
/// state and, for an outcome, its delivery to the owner, atomically. The
/// operator API (`operator.hpp`) is asked of it.
class dispatcher : public delivery::reliable_actor<dispatcher, detail::dispatcher_state> {
  using base = delivery::reliable_actor<dispatcher, detail::dispatcher_state>;

public:
  using events = persistence::event_types<>;

  /// The smallest `delivery.max_message_bytes` a dispatcher takes: an
  /// outcome whose result and reason were left out still fits.
  static constexpr std::size_t min_message_bytes = 8192;

  dispatcher(context<dispatcher> ctx, effects::adapters a, dispatcher_options o = {})
      : base(ctx, persistence::persistence_id{o.name}, delivery_options_of(o)), options_(std::move(o)) {
    if (options_.max_in_flight == 0 || options_.tick.count() <= 0)
      throw error(troupe::errc::invalid_argument,
                  "dispatcher " + options_.name + ": max_in_flight and tick must be positive");
    if (options_.delivery.max_message_bytes < min_message_bytes)
      throw error(troupe::errc::invalid_argument,
                  "dispatcher " + options_.name + ": delivery.max_message_bytes of " +
                      std::to_string(options_.delivery.max_message_bytes) + "; an outcome needs room for at least " +
                      std::to_string(min_message_bytes) + " (its operation ID, JSON-escaped, and a reason)");
    if (options_.retention.sweep_interval.count() <= 0 || options_.retention.sweep_batch == 0)
      throw error(troupe::errc::invalid_argument,
                  "dispatcher " + options_.name + ": retention sweep_interval and sweep_batch must be positive");
    shared_ = std::make_shared<detail::shared_part>();
    shared_->adapters = std::move(a);
    shared_->journal = this->storage_ptr();
    shared_->outbox = detail::outbox_table(this->storage());
    shared_->held = detail::claims::of(ctx.system());
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
  }

  /// Loads the outbox; in-doubt effects are resolved before anything else
  /// is executed.
  task<> on_recovery_completed() {
    auto all = co_await this->storage().async_run([this] {
      std::vector<detail::record> out;
      auto ec = this->storage().scan(shared_->outbox, "e", [&](std::string_view k, std::string_view v) {
        out.push_back(detail::decode(k.substr(1), v));
        return true;
      });
      if (ec) throw error(ec, "loading the outbox");
      return out;
    });
    const auto now = troupe::detail::now_ms();
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
      case effect_status::completed: expire_later(r); break;
      case effect_status::failed:
        expire_later(r);
        stuck_[id] = std::move(r);
        break;
      default: stuck_[id] = std::move(r); break;
      }
    }
    auto& ctx = this->actor_context();
    ctx.schedule_every(options_.tick, detail::tick{});
    ctx.schedule_every(options_.retention.sweep_interval, detail::sweep{});
    kick();
  }

  // -- messages ------------------------------------------------------------------

  void handle(detail::enqueued e) {
    const auto id = e.rec.info.id;
    if (open_.contains(id) || stuck_.contains(id)) return;
    e.rec.due_ms = troupe::detail::now_ms();
    add_open(std::move(e.rec));
    kick();
  }

  void handle(detail::tick) { kick(); }

  task<> handle(detail::results_ready) {
    auto batch = shared_->take();
    if (batch.empty()) co_return;
    std::vector<detail::plan> plans;
    plans.reserve(batch.size());
    std::vector<persistence::table_write> tables;
    this->begin_batch();
    try {
      const auto now = troupe::detail::now_ms();
      for (auto& r : batch) {
        plans.push_back(detail::decide(r, adapter_of(r.rec.info.type), now));
        auto& p = plans.back();
        if (!p.write) continue;
        if (p.update) p.rec.reporter = this->pid();
        tables.push_back(
            persistence::table_write::put(shared_->outbox, detail::outbox_key(p.rec.info.id), detail::encode(p.rec)));
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

  /// Removes the finished records whose time has come — not before their
  /// owner confirmed their outcome: the delivery that reported it is asked
  /// of its sender, this dispatcher's tracker, or the store for another's.
  task<> handle(detail::sweep) {
    const auto now = troupe::detail::now_ms();
    std::vector<expiring> due;
    while (!expiry_.empty() && expiry_.begin()->first <= now && due.size() < options_.retention.sweep_batch) {
      auto e = std::move(expiry_.begin()->second);
      expiry_.erase(expiry_.begin());
      if (open_.contains(e.id)) continue; // re-queued since
      due.push_back(std::move(e));
    }
    if (due.empty()) co_return;
    // A full batch: more may be due. The next batch goes at once, after
    // what waits in the mailbox (the sweep keeps up with any rate of
    // effects, a batch at a time; what stays is due again an interval on).
    if (due.size() == options_.retention.sweep_batch) (void)this->actor_context().self().tell(detail::sweep{});
    // Reported by another dispatcher (or by one before a restart): whether
    // that delivery is still recorded, in the store.
    std::vector<bool> unconfirmed(due.size(), false);
    bool foreign = false;
    for (std::size_t i = 0; i < due.size(); ++i) {
      if (due[i].reporter.empty() || due[i].reporter == this->pid())
        unconfirmed[i] = this->unconfirmed(due[i].outcome);
      else
        foreign = true;
    }
    if (foreign)
      co_await this->storage().async_run([&] {
        for (std::size_t i = 0; i < due.size(); ++i)
          if (!due[i].reporter.empty() && due[i].reporter != this->pid())
            unconfirmed[i] = this->recorded_unconfirmed(due[i].reporter, due[i].outcome);
      });
    std::vector<persistence::table_write> tables;
    for (std::size_t i = 0; i < due.size(); ++i) {
      auto& e = due[i];
      if (open_.contains(e.id)) continue;
      if (unconfirmed[i]) {
        // Its owner has not confirmed the outcome yet: the record stays
        // until it has (the delivery is never given up).
        expiry_.emplace(now + options_.retention.sweep_interval.count(), std::move(e));
        continue;
      }
      if (auto it = stuck_.find(e.id); it != stuck_.end()) {
        if (it->second.info.status != effect_status::failed) continue; // unknown: kept for an operator
        stuck_.erase(it);
      }
      tables.push_back(persistence::table_write::erase(shared_->outbox, detail::outbox_key(e.id)));
    }
    if (tables.empty()) co_return;
    const auto n = tables.size();
    co_await this->persist_all_with(std::move(tables));
    stats_.removed += n;
  }

  // -- the operator API ------------------------------------------------------------

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
    const auto now = troupe::detail::now_ms();
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
    const auto now = troupe::detail::now_ms();
    r.note(now, "operator", q.completed ? "completed" : "failed", q.detail);
    detail::finish(r, q.completed ? effect_status::completed : effect_status::failed, q.detail, now);
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

  static delivery::delivery_options delivery_options_of(const dispatcher_options& o) {
    auto d = o.delivery;
    d.redelivery.wait_when_full = true;
    return d;
  }

  const detail::erased_adapter* adapter_of(std::string_view type) const { return shared_->adapters.find(type); }

  void add_open(detail::record r) {
    const auto id = r.info.id;
    due_.emplace(r.due_ms, id);
    open_[id] = slot{std::move(r), false};
  }

  /// A finished record, due for removal: its ID, and the delivery that
  /// reported its outcome (by `reporter`).
  struct expiring {
    std::string id;
    delivery::delivery_id outcome;
    std::string reporter;
  };

  void expire_later(const detail::record& r) {
    const auto keep =
        r.info.status == effect_status::completed ? options_.retention.completed : options_.retention.failed;
    const auto at = keep == std::chrono::milliseconds::max() ? INT64_MAX : r.info.finished_ms + keep.count();
    expiry_.emplace(at, expiring{r.info.id, outcome_id(r.info.id, r.info.round, r.info.status), r.reporter});
  }

  /// The ID of the delivery that tells an effect's owner its state.
  static delivery::delivery_id outcome_id(const std::string& id, std::uint32_t round, effect_status status) {
    return delivery::delivery_id::of(id, std::to_string(round), to_string(status));
  }

  /// Starts what is due, the in-doubt effects found at start first.
  void kick() {
    const auto now = troupe::detail::now_ms();
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
      // The record is read again first, always: another dispatcher may
      // have attempted it since this one read it (and marked it in doubt),
      // also one that has stopped since — so whether others are running
      // now says nothing.
      asio::co_spawn(this->actor_context().get_executor(), detail::attempt(shared_, s.rec, true), asio::detached);
    }
  }

  /// Delivers `u` to the owner; joins the open batch. A result or reason
  /// too large for a delivery (`max_message_bytes`) is left out of it,
  /// with a reason that says so (the outbox record keeps them): the owner
  /// still learns the status.
  task<> report(const std::string& owner, const effect_updated& u) {
    auto id = outcome_id(u.id, u.round, u.status);
    effect_update m{u};
    const auto limit = this->delivery_settings().max_message_bytes;
    // Far enough below the limit, no need to measure: escaping makes a
    // character at most six (`\u0001`), and the rest of the JSON is small.
    if ((u.result.size() + u.reason.size() + u.id.size()) * 6 + 512 > limit &&
        persistence::to_json_text(m).size() > limit) {
      m.change.result.clear();
      m.change.reason = "the result of " + std::to_string(u.result.size()) + " bytes and reason of " +
                        std::to_string(u.reason.size()) + " bytes were left out of this outcome: over " +
                        "delivery_options::max_message_bytes (" + std::to_string(limit) +
                        "); the outbox record of dispatcher " + this->pid() + " keeps them";
    }
    co_await this->deliver(owner, std::move(id), std::move(m));
  }

  /// Writes `r` and reports its state to its owner, atomically.
  task<> write_with_update(detail::record& r) {
    r.reporter = this->pid();
    std::vector<persistence::table_write> tables;
    tables.push_back(persistence::table_write::put(shared_->outbox, detail::outbox_key(r.info.id), detail::encode(r)));
    this->begin_batch();
    try {
      const auto u = detail::update_of(r);
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
    this->actor_context().schedule_once(options_.tick, detail::results_ready{});
  }

  /// Once durable: the in-memory view follows the store.
  void settle(detail::plan p) {
    const auto id = p.rec.info.id;
    if (p.kind == detail::result::what::executed) ++stats_.executed;
    if (p.kind == detail::result::what::queried) ++stats_.queried;
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

  dispatcher_options options_;
  std::shared_ptr<detail::shared_part> shared_;
  std::unordered_map<std::string, slot> open_;         // pending
  std::set<std::pair<std::int64_t, std::string>> due_; // pending, not running, by due time
  std::unordered_set<std::string> first_;              // in doubt at start: resolved first
  std::map<std::string, detail::record> stuck_;        // failed and unknown
  std::multimap<std::int64_t, expiring> expiry_; // completed and failed, by removal time
  std::size_t in_flight_ = 0;
  dispatcher_stats stats_;
};

/// Spawns a dispatcher in `sys`; the first one spawned is the one effect
/// owners of `sys` notify. Needs a journal and a delivery transport set on
/// `sys`.
inline actor_ref<dispatcher> spawn_dispatcher(actor_system& sys, adapters a, dispatcher_options o = {}) {
  auto ref = sys.spawn<dispatcher>(std::move(a), std::move(o));
  (void)sys.extension_or<detail::dispatcher_slot>([&] { return std::make_shared<detail::dispatcher_slot>(ref); });
  return ref;
}

} // namespace troupe::effects
