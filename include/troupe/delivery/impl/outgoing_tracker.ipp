#pragma once

// The definitions of `outgoing_tracker` (troupe/delivery/detail/outgoing_tracker.hpp):
// no actor type in them, so with TROUPE_SEPARATE_COMPILATION they are
// compiled once (<troupe/delivery/impl/src.hpp>); header-only, that header
// includes this file.

#include <troupe/delivery/detail/outgoing_tracker.hpp>

namespace troupe::delivery::detail {

TROUPE_DECL outgoing_tracker::outgoing_tracker(std::string pid, std::shared_ptr<persistence::journal> j,
                                               detail::tables tables, std::shared_ptr<transport> net,
                                               std::unique_ptr<owner_link> owner, redelivery_policy policy,
                                               asio::any_io_executor ex)
    : pid_(std::move(pid)), prefix_(key_prefix(pid_)), journal_(std::move(j)), tables_(tables), net_(std::move(net)),
      owner_(std::move(owner)), policy_(policy), timer_(std::in_place, ex),
      rng_(std::hash<std::string>{}(pid_) ^ static_cast<std::uint64_t>(troupe::detail::now_ms())) {
  const auto half = policy_.initial_backoff / 2;
  tick_ = std::clamp<std::chrono::milliseconds>(std::chrono::duration_cast<std::chrono::milliseconds>(half),
                                                std::chrono::milliseconds(1), std::chrono::milliseconds(1000));
}

TROUPE_DECL void outgoing_tracker::start(std::vector<outgoing> recovered,
                                         std::unordered_map<std::string, std::string> dead) {
  {
    std::lock_guard g(mutex_);
    dead_ = std::move(dead);
  }
  net_->bind(pid_, this->shared_from_this());
  add(std::move(recovered));
  std::lock_guard g(mutex_);
  arm();
}

TROUPE_DECL void outgoing_tracker::close() {
  std::vector<waiter> ws;
  {
    std::lock_guard g(mutex_);
    if (closed_) return;
    closed_ = true;
    // The timer belongs to the actor system's thread pool: it must not
    // outlive it, while the tracker may (a write's callback can hold it).
    timer_.reset();
    ws.swap(waiters_);
  }
  net_->unbind(pid_, this);
  for (auto& w : ws) w(make_error_code(troupe::errc::actor_stopped));
}

TROUPE_DECL bool outgoing_tracker::try_reserve(std::size_t n) {
  std::lock_guard g(mutex_);
  if (pending_.size() + reserved_ + n > policy_.max_unconfirmed) return false;
  reserved_ += n;
  return true;
}

TROUPE_DECL void outgoing_tracker::unreserve(std::size_t n) {
  std::vector<waiter> ws;
  {
    std::lock_guard g(mutex_);
    reserved_ -= std::min(n, reserved_);
    ws.swap(waiters_);
  }
  for (auto& w : ws) w({});
}

TROUPE_DECL std::optional<std::string> outgoing_tracker::holder(const std::string& id) const {
  std::lock_guard g(mutex_);
  if (const auto* h = holder_of(id)) return *h;
  return std::nullopt;
}

TROUPE_DECL void outgoing_tracker::revived(const std::string& id) {
  std::lock_guard g(mutex_);
  dead_.erase(id);
}

TROUPE_DECL void outgoing_tracker::claim(const std::string& id, const std::string& to) {
  std::lock_guard g(mutex_);
  claim_locked(id, to);
}

TROUPE_DECL outgoing_tracker::reservation outgoing_tracker::reserve(const outgoing& o) {
  using r = typename reservation::outcome;
  std::lock_guard g(mutex_);
  if (!dead_.empty())
    if (auto it = dead_.find(o.id); it != dead_.end() && it->second != o.to) return {r::dead_elsewhere, it->second};
  if (const auto* h = holder_of(o.id))
    return *h == o.to ? reservation{r::same, {}} : reservation{r::held_elsewhere, *h};
  if (pending_.size() + reserved_ + 1 > policy_.max_unconfirmed) return {r::full, {}};
  const bool first = !mark_durable_;
  ++reserved_;
  claim_locked(o.id, o.to);
  reservation out;
  out.first = first;
  return out;
}

TROUPE_DECL bool outgoing_tracker::idle() const {
  std::lock_guard g(mutex_);
  return outstanding_none();
}

TROUPE_DECL void outgoing_tracker::clear_mark_if_idle() {
  std::lock_guard g(mutex_);
  if (closed_ || !outstanding_none()) return;
  journal_->write_later({work_clear()});
  mark_durable_ = false;
}

TROUPE_DECL bool outgoing_tracker::timer_waits() const {
  std::lock_guard g(mutex_);
  return armed_;
}

TROUPE_DECL persistence::table_write outgoing_tracker::work_mark() const {
  return persistence::work_index(tables_.work).mark(pid_, work_reason);
}

TROUPE_DECL persistence::table_write outgoing_tracker::work_clear() const {
  return persistence::work_index(tables_.work).clear(pid_, work_reason);
}

TROUPE_DECL void outgoing_tracker::unclaim(const std::string& id) {
  {
    std::lock_guard g(mutex_);
    release_claim(id);
  }
  unreserve(1);
}

TROUPE_DECL void outgoing_tracker::add_reserved(outgoing o, bool carried_mark) {
  std::optional<message> m;
  bool late = false;
  {
    std::lock_guard g(mutex_);
    reserved_ -= std::min<std::size_t>(1, reserved_);
    if (closed_) {
      release_claim(o.id);
      return;
    }
    // Durable, and no clearing was queued since it was reserved (it was
    // outstanding all along).
    if (carried_mark) mark_durable_ = true;
    late = past_horizon(o, troupe::detail::now_ms());
    // Late: the ID stays claimed until it is buried (see `bury`).
    if (!late) {
      release_claim(o.id);
      m = track(std::move(o), clock::now());
    }
  }
  if (late)
    bury(std::move(o), 0);
  else if (m)
    net_->send(std::move(*m));
}

TROUPE_DECL void outgoing_tracker::receive(message m) {
  auto key = queue_key(m);
  {
    std::lock_guard g(mutex_);
    if (closed_ || !queued_.insert(key).second) return;
  }
  // Dropped if the mailbox is full or the actor stopped: redelivered later.
  if (owner_->inbound(inbound{std::move(m)})) {
    std::lock_guard g(mutex_);
    queued_.erase(key);
  }
}

TROUPE_DECL void outgoing_tracker::dequeued(const message& m) {
  auto key = queue_key(m);
  std::lock_guard g(mutex_);
  queued_.erase(key);
}

TROUPE_DECL void outgoing_tracker::acknowledge(acknowledgement a) {
  if (a.expired) return expired(std::move(a));
  std::vector<waiter> ws;
  {
    std::lock_guard g(mutex_);
    auto it = pending_.find(a.id.str());
    // Repeated or late: harmless. From another receiver than the
    // delivery's: not its acknowledgement (a delivery is its sender's ID
    // to one receiver).
    if (it == pending_.end() || it->second.out.to != a.from) return;
    forget(it);
    ++(a.rejection ? stats_.refused : stats_.confirmed);
    ws.swap(waiters_);
    // Requested under the lock: a delivery reserved after it writes its
    // mark in a later write, which is applied after this one. A closed
    // tracker (its actor stopped; a successor may have loaded this
    // delivery and recorded more) removes the record, never the mark.
    std::vector<persistence::table_write> tables;
    tables.push_back(persistence::table_write::erase(tables_.deliveries, pending_key(a.id.str())));
    if (outstanding_none() && !closed_) {
      tables.push_back(work_clear());
      mark_durable_ = false;
    }
    journal_->write_later(std::move(tables));
    // Told under the lock: once `idle()` says so (and the entity may
    // passivate), the notice is in its mailbox, where a passivation
    // keeps it for the next activation. Told after the lock, it could
    // reach an actor that had passivated meanwhile, and be lost.
    if (a.rejection) {
      // Rejected: an outcome as final as a confirmation (the receiver
      // answers every copy so), told as such.
      owner_->rejected(delivery_rejected{std::move(a.id), std::move(a.from), std::move(*a.rejection)});
    } else {
      owner_->confirmed(confirmed{std::move(a.id), std::move(a.from), std::move(a.reply)});
    }
  }
  for (auto& w : ws) w({});
}

TROUPE_DECL void outgoing_tracker::expired(acknowledgement a) {
  std::optional<std::pair<outgoing, std::uint32_t>> dead;
  {
    std::lock_guard g(mutex_);
    auto it = pending_.find(a.id.str());
    if (it == pending_.end() || it->second.out.to != a.from || own(it->second.out) || closed_) return;
    claim_locked(it->second.out.id, it->second.out.to);
    dead.emplace(std::move(it->second.out), it->second.attempts);
    forget(it);
  }
  bury(std::move(dead->first), dead->second);
}

TROUPE_DECL bool outgoing_tracker::unconfirmed(const std::string& id) const {
  std::lock_guard g(mutex_);
  return pending_.contains(id);
}

TROUPE_DECL delivery_stats outgoing_tracker::stats() const {
  std::lock_guard g(mutex_);
  auto s = stats_;
  s.unconfirmed = pending_.size();
  return s;
}

TROUPE_DECL void outgoing_tracker::schedule(entry& e, const std::string& id, clock::time_point due) {
  if (e.slot) schedule_.erase(*e.slot);
  e.slot = schedule_.emplace(due, id);
  arm();
}

TROUPE_DECL const std::string* outgoing_tracker::holder_of(const std::string& id) const {
  if (auto it = pending_.find(id); it != pending_.end()) return &it->second.out.to;
  if (claimed_.empty()) return nullptr;
  if (auto it = claimed_.find(id); it != claimed_.end()) return &it->second;
  return nullptr;
}

TROUPE_DECL void outgoing_tracker::claim_locked(const std::string& id, const std::string& to) {
  if (spare_claim_) {
    spare_claim_.key() = id;
    spare_claim_.mapped() = to;
    auto [it, fresh, node] = claimed_.insert(std::move(spare_claim_));
    if (!fresh) {
      it->second = to;
      spare_claim_ = std::move(node);
    }
    return;
  }
  claimed_.insert_or_assign(id, to);
}

TROUPE_DECL void outgoing_tracker::release_claim(const std::string& id) {
  auto node = claimed_.extract(id);
  if (node && !spare_claim_) spare_claim_ = std::move(node);
}

TROUPE_DECL void outgoing_tracker::forget(typename std::unordered_map<std::string, entry>::iterator it) {
  if (it->second.slot) schedule_.erase(*it->second.slot);
  pending_.erase(it);
}

TROUPE_DECL std::uint64_t outgoing_tracker::queue_key(const message& m) {
  const std::uint64_t a = std::hash<std::string_view>{}(m.from);
  const std::uint64_t b = std::hash<std::string_view>{}(m.id.str());
  return a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
}

TROUPE_DECL void outgoing_tracker::add(std::vector<outgoing> out) {
  std::vector<message> now;
  std::vector<outgoing> late;
  {
    std::lock_guard g(mutex_);
    if (closed_) return;
    const auto t = clock::now();
    const auto wall = troupe::detail::now_ms();
    for (auto& o : out) {
      // Past its horizon already (found at a restart long after): never
      // sent late.
      if (past_horizon(o, wall)) {
        claim_locked(o.id, o.to); // until buried
        late.push_back(std::move(o));
        continue;
      }
      if (auto m = track(std::move(o), t)) now.push_back(std::move(*m));
    }
  }
  for (auto& m : now) net_->send(std::move(m));
  for (auto& o : late) bury(std::move(o), 0);
}

TROUPE_DECL bool outgoing_tracker::past_horizon(const outgoing& o, std::int64_t now_ms) const noexcept {
  const auto h = policy_.horizon();
  return !own(o) && h != std::chrono::milliseconds::max() && now_ms - o.created_ms >= h.count();
}

TROUPE_DECL std::optional<message> outgoing_tracker::track(outgoing&& o, clock::time_point t) {
  auto [it, fresh] = pending_.try_emplace(o.id);
  if (!fresh) return std::nullopt;
  it->second.out = std::move(o);
  it->second.attempts = 1;
  schedule(it->second, it->first, t + backoff(1));
  ++stats_.sent;
  return to_message(it->second.out);
}

TROUPE_DECL message outgoing_tracker::to_message(const outgoing& o) const {
  return message{o.to, pid_, delivery_id(o.id), o.manifest, o.version, o.payload, o.first_recorded_ms()};
}

TROUPE_DECL outgoing_tracker::clock::duration outgoing_tracker::backoff(std::uint32_t attempts) {
  const auto d = troupe::detail::exponential_backoff(policy_.initial_backoff, policy_.max_backoff, attempts);
  return std::chrono::duration_cast<clock::duration>(troupe::detail::jittered(d, policy_.jitter, rng_));
}

TROUPE_DECL void outgoing_tracker::arm() {
  if (closed_ || schedule_.empty()) return;
  const auto due = std::max(schedule_.begin()->first, clock::now() + tick_);
  if (armed_ && armed_at_ <= due) return;
  armed_ = true;
  armed_at_ = due;
  timer_->expires_at(due); // an earlier wait, if any, ends aborted
  timer_->async_wait([w = this->weak_from_this()](std::error_code ec) {
    if (ec) return;
    if (auto self = w.lock()) self->tick();
  });
}

TROUPE_DECL void outgoing_tracker::tick() {
  std::vector<message> resend;
  std::vector<std::pair<outgoing, std::uint32_t>> give_up;
  std::vector<redelivery_warning> warnings;
  {
    std::lock_guard g(mutex_);
    armed_ = false;
    if (closed_) return;
    const auto t = clock::now();
    const auto wall = troupe::detail::now_ms();
    // Only what is due, earliest first.
    while (!schedule_.empty() && schedule_.begin()->first <= t && resend.size() < policy_.burst) {
      auto it = pending_.find(schedule_.begin()->second);
      schedule_.erase(schedule_.begin());
      if (it == pending_.end()) continue;
      auto& e = it->second;
      e.slot.reset();
      if ((policy_.max_attempts != 0 && e.attempts >= policy_.max_attempts && !own(e.out)) ||
          past_horizon(e.out, wall)) {
        claim_locked(e.out.id, e.out.to); // until buried
        give_up.emplace_back(std::move(e.out), e.attempts);
        forget(it);
        continue;
      }
      ++e.attempts;
      schedule(e, it->first, t + backoff(e.attempts));
      resend.push_back(to_message(e.out));
      ++stats_.resent;
      if (policy_.warn_after != 0 && e.attempts == policy_.warn_after)
        warnings.push_back({delivery_id(e.out.id), e.out.to, e.attempts});
    }
    arm();
  }
  for (auto& m : resend) net_->send(std::move(m));
  for (auto& w : warnings) owner_->warning(std::move(w));
  for (auto& [o, attempts] : give_up) bury(std::move(o), attempts);
}

TROUPE_DECL void outgoing_tracker::bury(outgoing o, std::uint32_t attempts) {
  const auto since = troupe::detail::now_ms();
  std::vector<persistence::table_write> tables;
  tables.push_back(persistence::table_write::erase(tables_.deliveries, pending_key(o.id)));
  tables.push_back(
      persistence::table_write::put(tables_.deliveries, dead_key(o.id), encode_outgoing(o, attempts, since)));
  journal_->write({}, {}, std::move(tables),
                  [self = this->shared_from_this(), o = std::move(o), attempts, since](std::error_code ec) mutable {
                    self->buried(std::move(o), attempts, since, ec);
                  });
}

TROUPE_DECL void outgoing_tracker::buried(outgoing o, std::uint32_t attempts, std::int64_t since, std::error_code ec) {
  std::vector<waiter> ws;
  {
    std::lock_guard g(mutex_);
    release_claim(o.id);
    if (ec) {
      // Still pending in the store: keep trying it.
      if (closed_) return;
      auto [it, fresh] = pending_.try_emplace(o.id);
      if (!fresh) return;
      it->second.out = std::move(o);
      it->second.attempts = attempts;
      schedule(it->second, it->first, clock::now() + backoff(attempts));
      return;
    }
    ++stats_.dead_lettered;
    dead_.insert_or_assign(o.id, o.to);
    ws.swap(waiters_);
    // Buried (durably): the last one outstanding, the mark goes — once
    // its ID is released, requested under the lock as an acknowledgement's
    // clearing is, so a delivery reserved after it writes its mark later.
    if (outstanding_none() && !closed_) {
      journal_->write_later({work_clear()});
      mark_durable_ = false;
    }
  }
  for (auto& w : ws) w({});
  owner_->failed(delivery_failed{dead_letter{delivery_id(o.id), o.to, o.manifest, attempts, since}});
}

} // namespace troupe::delivery::detail
