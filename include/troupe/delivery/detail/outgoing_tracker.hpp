#pragma once

// A sender's outgoing deliveries: what is unconfirmed, when each is due
// again, redelivery, dead letters, room under `max_unconfirmed`. Also the
// actor's endpoint on the transport.

#include <troupe/actor_ref.hpp>
#include <troupe/concepts.hpp>
#include <troupe/error.hpp>
#include <troupe/delivery/delivery.hpp>
#include <troupe/delivery/delivery_id.hpp>
#include <troupe/delivery/operator.hpp>
#include <troupe/delivery/policy.hpp>
#include <troupe/delivery/transport.hpp>
#include <troupe/delivery/detail/codec.hpp>
#include <troupe/persistence/journal.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/detail/backoff.hpp>
#include <troupe/detail/clock.hpp>
#include <troupe/detail/stored_handler.hpp>
#include <troupe/detail/unique_function.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace troupe::delivery::detail {

/// Told to a receiver by its endpoint.
struct inbound {
  message msg;
};

/// A sender's unconfirmed deliveries, shared by the actor (which adds them
/// once durable), the redelivery timer and the acknowledgements (which may
/// arrive while the actor is busy): so acknowledgements free capacity even
/// while a handler waits for it. Also the actor's endpoint on the transport:
/// it puts what arrives for the actor into its mailbox (`inbound`).
template <class Actor>
class outgoing_tracker final : public endpoint, public std::enable_shared_from_this<outgoing_tracker<Actor>> {
public:
  using clock = std::chrono::steady_clock;

  outgoing_tracker(std::string pid, std::shared_ptr<persistence::journal> j, detail::tables tables,
                   std::shared_ptr<transport> net, actor_ref<Actor> self, redelivery_policy policy,
                   asio::any_io_executor ex)
      : pid_(std::move(pid)), prefix_(key_prefix(pid_)), journal_(std::move(j)), tables_(tables), net_(std::move(net)),
        self_(std::move(self)), policy_(policy), timer_(std::in_place, ex),
        rng_(std::hash<std::string>{}(pid_) ^ static_cast<std::uint64_t>(troupe::detail::now_ms())) {
    const auto half = policy_.initial_backoff / 2;
    tick_ = std::clamp<std::chrono::milliseconds>(std::chrono::duration_cast<std::chrono::milliseconds>(half),
                                                  std::chrono::milliseconds(1), std::chrono::milliseconds(1000));
  }

  std::string pending_key(std::string_view id) const { return key(prefix_, 'p', id); }
  std::string dead_key(std::string_view id) const { return key(prefix_, 'x', id); }
  const std::string& prefix() const noexcept { return prefix_; }

  /// Binds the endpoint, and sends what recovery found pending at once;
  /// `dead` are the dead letters' IDs and receivers.
  void start(std::vector<outgoing> recovered, std::unordered_map<std::string, std::string> dead = {}) {
    {
      std::lock_guard g(mutex_);
      dead_ = std::move(dead);
    }
    net_->bind(pid_, this->shared_from_this());
    add(std::move(recovered));
    std::lock_guard g(mutex_);
    arm();
  }

  void close() {
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

  /// Room for `n` more deliveries: true, or false when full.
  bool try_reserve(std::size_t n) {
    std::lock_guard g(mutex_);
    if (pending_.size() + reserved_ + n > policy_.max_unconfirmed) return false;
    reserved_ += n;
    return true;
  }

  void unreserve(std::size_t n) {
    std::vector<waiter> ws;
    {
      std::lock_guard g(mutex_);
      reserved_ -= std::min(n, reserved_);
      ws.swap(waiters_);
    }
    for (auto& w : ws) w({});
  }

  /// Completes (`void(std::error_code)`) when capacity may have been freed.
  template <class Token>
  auto wait_for_room(Token&& token) {
    return asio::async_initiate<Token, void(std::error_code)>(
        [this](auto handler) {
          auto h = std::make_shared<troupe::detail::stored_handler<decltype(handler)>>(std::move(handler));
          std::lock_guard g(mutex_);
          if (closed_) {
            h->post(make_error_code(troupe::errc::actor_stopped));
            return;
          }
          if (pending_.size() + reserved_ < policy_.max_unconfirmed) {
            h->post(std::error_code{});
            return;
          }
          waiters_.emplace_back([h](std::error_code ec) { h->post(ec); });
        },
        token);
  }

  /// The receiver of the delivery `id` while it is unconfirmed, or being
  /// recorded (`claim`); none if the ID is free.
  std::optional<std::string> holder(const std::string& id) const {
    std::lock_guard g(mutex_);
    if (const auto* h = holder_of(id)) return *h;
    return std::nullopt;
  }

  /// The dead letter under `id` was re-queued (it is pending again).
  void revived(const std::string& id) {
    std::lock_guard g(mutex_);
    dead_.erase(id);
  }

  /// `id` is being recorded for `to` (room was reserved for it): held until
  /// `add_reserved` tracks it or `unclaim` gives it up.
  void claim(const std::string& id, const std::string& to) {
    std::lock_guard g(mutex_);
    claim_locked(id, to);
  }

  /// What `reserve` found.
  struct reservation {
    enum class outcome : std::uint8_t {
      reserved,      ///< room reserved and the ID claimed for `o.to`
      same,          ///< a delivery under the ID is unconfirmed to `o.to`: it is that one
      full,          ///< no room: nothing reserved
      dead_elsewhere, ///< a dead letter under the ID is to `other`
      held_elsewhere, ///< a delivery under the ID is unconfirmed (or being recorded) to `other`
    } what = outcome::reserved;
    std::string other;
    /// The delivery's write carries the sender's mark in the work index
    /// (`work_mark`): no write of this tracker's carried it yet, or it
    /// queued the mark's clearing since. Never decided from what `start`
    /// was given: a read does not see what `write_later` has queued (an
    /// earlier activation's confirmation), so what was loaded may be stale.
    bool first = false;
  };

  /// For a new delivery `o`, under one lock: refused if its ID is a dead
  /// letter's or another receiver's delivery's, the same delivery if it is
  /// unconfirmed to `o.to`, else room for it reserved and its ID claimed.
  reservation reserve(const outgoing& o) {
    using r = reservation::outcome;
    std::lock_guard g(mutex_);
    if (!dead_.empty())
      if (auto it = dead_.find(o.id); it != dead_.end() && it->second != o.to) return {r::dead_elsewhere, it->second};
    if (const auto* h = holder_of(o.id)) return *h == o.to ? reservation{r::same, {}} : reservation{r::held_elsewhere, *h};
    if (pending_.size() + reserved_ + 1 > policy_.max_unconfirmed) return {r::full, {}};
    const bool first = !mark_durable_;
    ++reserved_;
    claim_locked(o.id, o.to);
    reservation out;
    out.first = first;
    return out;
  }

  /// Whether nothing is outstanding: unconfirmed, being recorded, or room
  /// reserved (the sender may passivate; its work mark may go).
  bool idle() const {
    std::lock_guard g(mutex_);
    return outstanding_none();
  }

  /// Resumed with nothing outstanding: a mark left behind goes, under the
  /// lock that orders its clearing before any later reservation's mark.
  void clear_mark_if_idle() {
    std::lock_guard g(mutex_);
    if (closed_ || !outstanding_none()) return;
    journal_->write_later({work_clear()});
    mark_durable_ = false;
  }

  /// Whether its timer waits for a delivery due again (false once nothing
  /// is unconfirmed and the last wait has ended: it wakes for nothing).
  bool timer_waits() const {
    std::lock_guard g(mutex_);
    return armed_;
  }

  /// The sender's mark in the work index (set while it has unconfirmed
  /// deliveries), and its clearing.
  persistence::table_write work_mark() const {
    return persistence::work_index(tables_.work).mark(pid_, work_reason);
  }
  persistence::table_write work_clear() const {
    return persistence::work_index(tables_.work).clear(pid_, work_reason);
  }

  /// Gives up a claim and its reserved room (its record was not written).
  void unclaim(const std::string& id) {
    {
      std::lock_guard g(mutex_);
      release_claim(id);
    }
    unreserve(1);
  }

  /// One delivery whose intent is durable (it was reserved);
  /// `carried_mark`: its write carried the work mark. Past its horizon
  /// already (its write, or room for it, took that long): never sent, a
  /// dead letter.
  void add_reserved(outgoing o, bool carried_mark = false) {
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

  /// One copy per sender and ID waits in the mailbox at most: while it
  /// waits, later copies (redeliveries) are dropped, so a slow receiver's
  /// mailbox does not fill with redeliveries of what it has not reached yet.
  void receive(message m) override {
    auto key = queue_key(m);
    {
      std::lock_guard g(mutex_);
      if (closed_ || !queued_.insert(key).second) return;
    }
    // Dropped if the mailbox is full or the actor stopped: redelivered later.
    if (self_.tell(inbound{std::move(m)})) {
      std::lock_guard g(mutex_);
      queued_.erase(key);
    }
  }

  /// The actor took `m` out of its mailbox.
  void dequeued(const message& m) {
    auto key = queue_key(m);
    std::lock_guard g(mutex_);
    queued_.erase(key);
  }

  /// Confirms the delivery: forgotten at once, its record removed with the
  /// store's next write (`journal::write_later`). Should a crash come
  /// first, the delivery is sent again after the restart and answered from
  /// the receiver's dedup mark.
  void acknowledge(acknowledgement a) override {
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
        if constexpr (handles<Actor, delivery_rejected>)
          (void)self_.tell(delivery_rejected{std::move(a.id), std::move(a.from), std::move(*a.rejection)});
      } else {
        if constexpr (handles<Actor, confirmed>)
          (void)self_.tell(confirmed{std::move(a.id), std::move(a.from), std::move(a.reply)});
      }
    }
    for (auto& w : ws) w({});
  }

  /// The receiver will never process the delivery (it may have forgotten
  /// it; see `acknowledgement::expired`): a dead letter, as one past its
  /// horizon, its ID claimed until the dead letter is written.
  void expired(acknowledgement a) {
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

  /// Whether the delivery `id` is tracked (recorded, not yet confirmed).
  bool unconfirmed(const std::string& id) const {
    std::lock_guard g(mutex_);
    return pending_.contains(id);
  }

  delivery_stats stats() const {
    std::lock_guard g(mutex_);
    auto s = stats_;
    s.unconfirmed = pending_.size();
    return s;
  }

private:
  using waiter = troupe::detail::unique_function<void(std::error_code)>;

  using schedule_map = std::multimap<clock::time_point, std::string>;

  struct entry {
    outgoing out;
    std::uint32_t attempts = 0;
    std::optional<schedule_map::iterator> slot; // in schedule_
  };

  /// With the mutex held: `e` (under `id`) is due again at `due`.
  void schedule(entry& e, const std::string& id, clock::time_point due) {
    if (e.slot) schedule_.erase(*e.slot);
    e.slot = schedule_.emplace(due, id);
    arm();
  }

  /// With the mutex held: nothing unconfirmed, being recorded or reserved.
  bool outstanding_none() const noexcept { return pending_.empty() && claimed_.empty() && reserved_ == 0; }

  /// With the mutex held: the receiver `id` is unconfirmed or being
  /// recorded to, or null.
  const std::string* holder_of(const std::string& id) const {
    if (auto it = pending_.find(id); it != pending_.end()) return &it->second.out.to;
    if (claimed_.empty()) return nullptr;
    if (auto it = claimed_.find(id); it != claimed_.end()) return &it->second;
    return nullptr;
  }

  /// With the mutex held. A released claim's node is kept for the next
  /// claim (one delivery after another costs no allocation for it).
  void claim_locked(const std::string& id, const std::string& to) {
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

  /// With the mutex held.
  void release_claim(const std::string& id) {
    auto node = claimed_.extract(id);
    if (node && !spare_claim_) spare_claim_ = std::move(node);
  }

  /// With the mutex held.
  void forget(std::unordered_map<std::string, entry>::iterator it) {
    if (it->second.slot) schedule_.erase(*it->second.slot);
    pending_.erase(it);
  }

  /// Copies are told apart by sender and ID (each sender gets its
  /// acknowledgement), by a 64-bit hash of both: should two waiting
  /// deliveries ever share it, the later one's copy is dropped and sent
  /// again by its sender, as any dropped copy is.
  static std::uint64_t queue_key(const message& m) {
    const std::uint64_t a = std::hash<std::string_view>{}(m.from);
    const std::uint64_t b = std::hash<std::string_view>{}(m.id.str());
    return a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  }

  void add(std::vector<outgoing> out) {
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

  /// The library's own deliveries (effect outcomes) are never given up:
  /// redelivered at the capped interval until confirmed.
  static bool own(const outgoing& o) noexcept { return std::string_view(o.manifest).starts_with("troupe."); }

  /// Whether `o` was first recorded longer than the horizon before `now_ms`
  /// (wall clock, as its record's time): it must not be sent any more.
  bool past_horizon(const outgoing& o, std::int64_t now_ms) const noexcept {
    const auto h = policy_.horizon();
    return !own(o) && h != std::chrono::milliseconds::max() && now_ms - o.created_ms >= h.count();
  }

  /// With the mutex held: tracks `o`, due again after the first backoff,
  /// and gives the message to send now — none if a delivery under its ID
  /// is unconfirmed already (then it is that delivery).
  std::optional<message> track(outgoing&& o, clock::time_point t) {
    auto [it, fresh] = pending_.try_emplace(o.id);
    if (!fresh) return std::nullopt;
    it->second.out = std::move(o);
    it->second.attempts = 1;
    schedule(it->second, it->first, t + backoff(1));
    ++stats_.sent;
    return to_message(it->second.out);
  }

  message to_message(const outgoing& o) const {
    return message{o.to, pid_, delivery_id(o.id), o.manifest, o.version, o.payload, o.first_recorded_ms()};
  }

  clock::duration backoff(std::uint32_t attempts) {
    const auto d = troupe::detail::exponential_backoff(policy_.initial_backoff, policy_.max_backoff, attempts);
    return std::chrono::duration_cast<clock::duration>(troupe::detail::jittered(d, policy_.jitter, rng_));
  }

  /// With the mutex held: the timer waits for the earliest delivery due
  /// again (at least a tick from now, so that what is due together goes
  /// together), and is idle when none is (a tracker with nothing
  /// unconfirmed — most of them, in a process with many finished actors —
  /// costs no timer, one waiting out a long backoff wakes once).
  void arm() {
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

  void tick() {
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
    if constexpr (handles<Actor, redelivery_warning>)
      for (auto& w : warnings) (void)self_.tell(std::move(w));
    for (auto& [o, attempts] : give_up) bury(std::move(o), attempts);
  }

  /// Moves a delivery to the dead letters, atomically. Its ID is claimed
  /// meanwhile (no longer pending in memory, still pending in the store): a
  /// delivery under it to another receiver is refused until the dead letter
  /// is written, as after.
  void bury(outgoing o, std::uint32_t attempts) {
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

  void buried(outgoing o, std::uint32_t attempts, std::int64_t since, std::error_code ec) {
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
    if constexpr (handles<Actor, delivery_failed>)
      (void)self_.tell(delivery_failed{dead_letter{delivery_id(o.id), o.to, o.manifest, attempts, since}});
  }

  const std::string pid_;
  const std::string prefix_;
  std::shared_ptr<persistence::journal> journal_;
  const detail::tables tables_;
  std::shared_ptr<transport> net_;
  actor_ref<Actor> self_;
  const redelivery_policy policy_;
  std::chrono::milliseconds tick_;

  mutable std::mutex mutex_;
  std::optional<asio::steady_timer> timer_;
  bool armed_ = false; // the timer waits, until `armed_at_` (see `arm`)
  clock::time_point armed_at_{};
  std::minstd_rand rng_;
  std::unordered_map<std::string, entry> pending_;
  schedule_map schedule_;                    // pending deliveries by the time they are due again
  std::unordered_set<std::uint64_t> queued_; // received (sender, ID) (queue_key), waiting in the mailbox
  std::size_t reserved_ = 0;
  std::unordered_map<std::string, std::string> claimed_; // ID -> receiver, reserved and being recorded
  decltype(claimed_)::node_type spare_claim_;           // a released claim's node, for the next
  std::unordered_map<std::string, std::string> dead_;    // ID -> receiver, dead letters
  std::vector<waiter> waiters_;
  delivery_stats stats_;
  bool closed_ = false;
  /// A write of this tracker's carried the work mark, and it queued no
  /// clearing since: the mark is in the store (the work index is exact at
  /// every durable point: a sender's unconfirmed delivery always has it).
  bool mark_durable_ = false;
};

} // namespace troupe::delivery::detail
