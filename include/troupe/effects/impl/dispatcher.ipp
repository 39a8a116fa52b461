#pragma once

// The definitions of `dispatcher` (troupe/effects/dispatcher.hpp): it
// depends on no user type, so with TROUPE_SEPARATE_COMPILATION it is
// compiled once (<troupe/impl/src.hpp>), its coroutines included; header-
// only, that header includes this file.

#include <troupe/effects/dispatcher.hpp>

// GCC 12 warns (-Wsubobject-linkage) that these coroutines' frames have
// fields of types without linkage when the file that includes this one is
// a source file rather than a header (the compiled library's): the frames
// are the compiler's own, and nothing in them is visible elsewhere.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsubobject-linkage"
#endif

namespace troupe::effects {

TROUPE_DECL dispatcher::dispatcher(context<dispatcher> ctx, effects::adapters a, dispatcher_options o)
    : base(ctx, persistence::persistence_id{o.name}, delivery_options_of(o)), options_(std::move(o)) {
  if (options_.max_in_flight == 0 || options_.tick.count() <= 0)
    throw error(troupe::errc::invalid_argument,
                "dispatcher " + options_.name + ": max_in_flight and tick must be positive");
  if (options_.delivery.max_message_bytes < min_message_bytes)
    throw error(troupe::errc::invalid_argument,
                "dispatcher " + options_.name + ": delivery.max_message_bytes of " +
                    std::to_string(options_.delivery.max_message_bytes) + "; an outcome needs room for at least " +
                    std::to_string(min_message_bytes) + " (its operation ID, JSON-escaped, and a reason)");
  if (options_.window == 0)
    throw error(troupe::errc::invalid_argument, "dispatcher " + options_.name + ": window must be at least 1");
  shared_ = std::make_shared<detail::shared_part>();
  shared_->adapters = std::move(a);
  shared_->journal = this->storage_ptr();
  shared_->outbox = detail::outbox_table(this->storage());
  shared_->held = detail::claims::of(ctx.system());
  self_ = ctx.self();
  shared_->notify = [self = self_] { (void)self.tell(detail::results_ready{}); };
  shared_->kick = [self = self_] { (void)self.tell(detail::tick{}); };
  // Finished records whose outcome was confirmed go once their retention
  // has passed: the store drops them as it compacts.
  this->storage().set_expiry(shared_->outbox, [c = options_.retention.completed, f = options_.retention.failed](
                                                  std::string_view key, std::string_view value) {
    return detail::record_expiry(key, value, c, f);
  });
}

TROUPE_DECL dispatcher::~dispatcher() {
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
  // Confirmations gathered and not yet marked go back to the mailbox: a
  // restarted dispatcher marks them (a stopped one's mailbox is closed).
  for (auto& id : confirming_) (void)self_.tell(delivery::confirmed{std::move(id), {}, {}});
}

TROUPE_DECL task<> dispatcher::on_recovery_completed() {
  co_await this->storage().async_run([this] { index_pending(); });
  first_pass_ = true;
  co_await refill();
  this->actor_context().schedule_every(options_.tick, detail::tick{});
  kick();
}

TROUPE_DECL void dispatcher::handle(detail::enqueued e) {
  const auto id = e.rec.info.id;
  if (open_.contains(id)) return;
  if (open_.size() >= options_.window) {
    more_ = true; // it waits in the outbox until there is room
    return;
  }
  e.rec.due_ms = troupe::detail::now_ms();
  add_open(std::move(e.rec));
  kick();
}

TROUPE_DECL void dispatcher::handle(detail::tick) {
  kick();
  maybe_refill();
}

TROUPE_DECL task<> dispatcher::handle(detail::refill) {
  co_await refill();
  kick();
}

TROUPE_DECL task<> dispatcher::handle(detail::results_ready) {
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
      if (p.update) {
        p.rec.reporter = this->pid();
        p.rec.confirmed = false;
      }
      tables.push_back(
          persistence::table_write::put(shared_->outbox, detail::outbox_key(p.rec.info.id), detail::encode(p.rec)));
      tables.push_back(detail::pending_entry(shared_->outbox, p.rec));
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

TROUPE_DECL void dispatcher::handle(delivery::confirmed c) {
  if (!detail::outcome_of(c.id)) return;
  if (confirming_.empty()) (void)self_.tell(detail::mark_confirmed{});
  confirming_.push_back(std::move(c.id));
}

TROUPE_DECL task<> dispatcher::handle(detail::mark_confirmed) {
  std::vector<detail::outcome_parts> confirmed;
  for (auto& id : std::exchange(confirming_, {}))
    if (auto parts = detail::outcome_of(id)) confirmed.push_back(std::move(*parts));
  if (confirmed.empty()) co_return;
  // A mark lost (to a crash, or to a record that cannot be read) keeps
  // its record, as a lost `write_later` does.
  auto marks = co_await this->storage().async_run(
      [this, &confirmed] { return detail::confirmation_marks(this->storage(), shared_->outbox, confirmed); });
  if (!marks.empty()) this->storage().write_later(std::move(marks));
}

TROUPE_DECL task<std::vector<effect_info>> dispatcher::handle(list_effects q) {
  auto all = co_await this->storage().async_run([this, q] {
    std::vector<effect_info> out;
    scan_records([&](detail::record& r) {
      if (r.info.status == effect_status::failed || r.info.status == effect_status::unknown ||
          (q.pending && r.info.status == effect_status::pending))
        out.push_back(std::move(r.info));
    });
    return out;
  });
  co_return all;
}

TROUPE_DECL task<bool> dispatcher::handle(requeue_effect q) {
  auto found = co_await read_record(q.id);
  if (!found || (found->info.status != effect_status::failed && found->info.status != effect_status::unknown))
    co_return false;
  auto r = std::move(*found);
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
  // Held already (a late `enqueued`): its attempt reads the record again.
  if (!open_.contains(r.info.id)) {
    if (open_.size() < options_.window)
      add_open(std::move(r));
    else
      more_ = true;
  }
  kick();
  co_return true;
}

TROUPE_DECL task<bool> dispatcher::handle(resolve_effect q) {
  auto found = co_await read_record(q.id);
  if (!found || found->info.status != effect_status::unknown) co_return false;
  auto r = std::move(*found);
  const auto now = troupe::detail::now_ms();
  r.note(now, "operator", q.completed ? "completed" : "failed", q.detail);
  detail::finish(r, q.completed ? effect_status::completed : effect_status::failed, q.detail, now);
  co_await write_with_update(r);
  co_return true;
}

TROUPE_DECL task<dispatcher_stats> dispatcher::handle(effects_status) {
  auto s = stats_;
  s.running = in_flight_;
  co_await this->storage().async_run([this, &s] {
    scan_records([&](const detail::record& r) {
      switch (r.info.status) {
      case effect_status::pending: ++s.pending; break;
      case effect_status::failed: ++s.failed; break;
      case effect_status::unknown: ++s.unknown; break;
      default: break;
      }
    });
  });
  co_return s;
}

TROUPE_DECL delivery::delivery_options dispatcher::delivery_options_of(const dispatcher_options& o) {
  auto d = o.delivery;
  d.redelivery.wait_when_full = true;
  return d;
}

TROUPE_DECL void dispatcher::add_open(detail::record r) {
  const auto id = r.info.id;
  due_.emplace(r.due_ms, id);
  open_[id] = slot{std::move(r), false};
}

TROUPE_DECL delivery::delivery_id dispatcher::outcome_id(const std::string& id, std::uint32_t round, effect_status status) {
  return delivery::delivery_id::of(id, std::to_string(round), to_string(status));
}

TROUPE_DECL task<std::optional<detail::record>> dispatcher::read_record(const std::string& id) {
  auto read = [this, key = detail::outbox_key(id), id] {
    std::optional<std::string> v;
    if (auto ec = this->storage().get(shared_->outbox, key, v)) throw error(ec, "reading outbox record " + id);
    std::optional<detail::record> r;
    if (v) r = detail::decode(id, *v);
    return r;
  };
  co_return co_await this->storage().async_run(std::move(read));
}

template <class F>
void dispatcher::scan_records(F&& f) {
  auto ec = this->storage().scan(shared_->outbox, "e", [&](std::string_view k, std::string_view v) {
    auto r = detail::decode(k.substr(1), v);
    f(r);
    return true;
  });
  if (ec) throw error(ec, "reading the outbox");
}

TROUPE_DECL void dispatcher::index_pending() {
  auto& j = this->storage();
  std::optional<std::string> built;
  if (auto ec = j.get(shared_->outbox, std::string(detail::pending_index_built), built))
    throw error(ec, "reading the outbox");
  if (built) return;
  std::vector<persistence::table_write> w;
  scan_records([&](const detail::record& r) {
    if (r.info.status == effect_status::pending) w.push_back(detail::pending_entry(shared_->outbox, r));
  });
  w.push_back(persistence::table_write::put(shared_->outbox, std::string(detail::pending_index_built), {}));
  std::promise<std::error_code> done;
  auto written = done.get_future();
  j.write({}, {}, std::move(w), [&done](std::error_code e) { done.set_value(e); });
  if (auto e = written.get()) throw error(e, "writing the outbox's pending index");
}

TROUPE_DECL void dispatcher::maybe_refill() {
  if (more_ && !refilling_ && open_.size() < options_.window / 2 + 1) {
    refilling_ = true;
    (void)this->actor_context().self().tell(detail::refill{});
  }
}

TROUPE_DECL task<> dispatcher::refill() {
  refilling_ = false;
  if (!more_) co_return;
  const auto room = options_.window - std::min(options_.window, open_.size());
  if (room == 0) co_return;
  struct page {
    std::vector<detail::record> records;
    std::vector<persistence::table_write> stale; // index entries of records no longer pending
    std::string last;
    bool end = false;
  };
  auto read = [this, room, from = cursor_] {
    page p;
    auto& j = this->storage();
    std::size_t seen = 0;
    p.end = true;
    auto ec = j.scan_from(shared_->outbox, detail::pending_prefix, from, [&](std::string_view k, std::string_view) {
      if (!from.empty() && k == from) return true; // read last time
      if (seen == room) {
        p.end = false;
        return false;
      }
      p.last = std::string(k);
      const std::string id(k.substr(detail::pending_prefix.size()));
      if (open_.contains(id)) return true;
      std::optional<std::string> v;
      if (auto e = j.get(shared_->outbox, detail::outbox_key(id), v)) throw error(e, "reading outbox record " + id);
      auto r = v ? std::optional<detail::record>(detail::decode(id, *v)) : std::nullopt;
      if (!r || r->info.status != effect_status::pending) {
        p.stale.push_back(persistence::table_write::erase(shared_->outbox, std::string(k)));
        return true;
      }
      p.records.push_back(std::move(*r));
      ++seen;
      return true;
    });
    if (ec) throw error(ec, "reading the outbox's pending index");
    return p;
  };
  // (open_ is read on the journal's thread while this actor waits.)
  auto p = co_await this->storage().async_run(std::move(read));
  if (!p.stale.empty()) this->storage().write_later(std::move(p.stale));
  const auto now = troupe::detail::now_ms();
  for (auto& r : p.records) {
    if (open_.contains(r.info.id)) continue;
    if (first_pass_) {
      // An attempt may have been cut short by the restart: where the
      // system can be asked, ask before executing.
      if (auto a = adapter_of(r.info.type); a && a->can_query) r.info.in_doubt = true;
      if (r.info.in_doubt) {
        r.due_ms = now;
        first_.insert(r.info.id);
      }
    }
    add_open(std::move(r));
  }
  if (!p.end) {
    cursor_ = std::move(p.last);
  } else {
    // The end: everything pending is in memory if this pass began at the
    // start; otherwise the next one begins there.
    if (cursor_.empty()) more_ = false;
    cursor_.clear();
    first_pass_ = false;
  }
}

TROUPE_DECL void dispatcher::kick() {
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

TROUPE_DECL task<> dispatcher::report(const std::string& owner, const effect_updated& u) {
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

TROUPE_DECL task<> dispatcher::write_with_update(detail::record& r) {
  r.reporter = this->pid();
  r.confirmed = false;
  std::vector<persistence::table_write> tables;
  tables.push_back(persistence::table_write::put(shared_->outbox, detail::outbox_key(r.info.id), detail::encode(r)));
  tables.push_back(detail::pending_entry(shared_->outbox, r));
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

TROUPE_DECL void dispatcher::retry_later(std::vector<detail::result> batch) {
  ++stats_.write_retries;
  shared_->put_back(std::move(batch));
  this->actor_context().schedule_once(options_.tick, detail::results_ready{});
}

TROUPE_DECL void dispatcher::settle(detail::plan p) {
  const auto id = p.rec.info.id;
  if (p.kind == detail::result::what::executed) ++stats_.executed;
  if (p.kind == detail::result::what::queried) ++stats_.queried;
  shared_->held->release(id);
  first_.erase(id);
  --in_flight_;
  auto it = open_.find(id);
  if (p.drop) {
    if (it != open_.end()) open_.erase(it);
    maybe_refill();
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
  if (p.threshold)
    if (const auto* a = adapter_of(r.info.type); a && a->policy.on_threshold) a->policy.on_threshold(r.info);
  maybe_refill();
}

TROUPE_DECL actor_ref<dispatcher> spawn_dispatcher(actor_system& sys, adapters a, dispatcher_options o) {
  auto ref = sys.spawn<dispatcher>(std::move(a), std::move(o));
  (void)sys.extension_or<detail::dispatcher_slot>([&] { return std::make_shared<detail::dispatcher_slot>(ref); });
  return ref;
}

} // namespace troupe::effects

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
