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
#include <troupe/detail/compile_mode.hpp>

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

/// What a tracker tells its actor, whatever the actor's type: `inbound`
/// always (its result is `tell`'s), each notice only if the actor handles it.
class owner_link {
public:
  virtual ~owner_link() = default;
  virtual std::error_code inbound(detail::inbound m) = 0;
  virtual void rejected(delivery_rejected n) = 0;
  virtual void confirmed(troupe::delivery::confirmed n) = 0;
  virtual void warning(redelivery_warning n) = 0;
  virtual void failed(delivery_failed n) = 0;
};

template <class Actor>
class owner_link_of final : public owner_link {
public:
  explicit owner_link_of(actor_ref<Actor> self) : self_(std::move(self)) {}
  std::error_code inbound(detail::inbound m) override { return self_.tell(std::move(m)); }
  void rejected(delivery_rejected n) override {
    if constexpr (handles<Actor, delivery_rejected>) (void)self_.tell(std::move(n));
  }
  void confirmed(troupe::delivery::confirmed n) override {
    if constexpr (handles<Actor, troupe::delivery::confirmed>) (void)self_.tell(std::move(n));
  }
  void warning(redelivery_warning n) override {
    if constexpr (handles<Actor, redelivery_warning>) (void)self_.tell(std::move(n));
  }
  void failed(delivery_failed n) override {
    if constexpr (handles<Actor, delivery_failed>) (void)self_.tell(std::move(n));
  }

private:
  actor_ref<Actor> self_;
};

/// A sender's unconfirmed deliveries, shared by the actor (which adds them
/// once durable), the redelivery timer and the acknowledgements (which may
/// arrive while the actor is busy): so acknowledgements free capacity even
/// while a handler waits for it. Also the actor's endpoint on the transport:
/// it puts what arrives for the actor into its mailbox (`inbound`).
///
/// It depends on no actor type (it reaches its actor through an
/// `owner_link`): with TROUPE_SEPARATE_COMPILATION it is compiled once.
class outgoing_tracker final : public endpoint, public std::enable_shared_from_this<outgoing_tracker> {
public:
  using clock = std::chrono::steady_clock;

  template <class Actor>
  outgoing_tracker(std::string pid, std::shared_ptr<persistence::journal> j, detail::tables tables,
                   std::shared_ptr<transport> net, actor_ref<Actor> self, redelivery_policy policy,
                   asio::any_io_executor ex)
      : outgoing_tracker(std::move(pid), std::move(j), tables, std::move(net),
                         std::make_unique<owner_link_of<Actor>>(std::move(self)), policy, std::move(ex)) {}

  outgoing_tracker(std::string pid, std::shared_ptr<persistence::journal> j, detail::tables tables,
                   std::shared_ptr<transport> net, std::unique_ptr<owner_link> owner, redelivery_policy policy,
                   asio::any_io_executor ex);

  std::string pending_key(std::string_view id) const { return key(prefix_, 'p', id); }
  std::string dead_key(std::string_view id) const { return key(prefix_, 'x', id); }
  const std::string& prefix() const noexcept { return prefix_; }

  /// Binds the endpoint, and sends what recovery found pending at once;
  /// `dead` are the dead letters' IDs and receivers.
  void start(std::vector<outgoing> recovered, std::unordered_map<std::string, std::string> dead = {});

  void close();

  /// Room for `n` more deliveries: true, or false when full.
  bool try_reserve(std::size_t n);

  void unreserve(std::size_t n);

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
  std::optional<std::string> holder(const std::string& id) const;

  /// The dead letter under `id` was re-queued (it is pending again).
  void revived(const std::string& id);

  /// `id` is being recorded for `to` (room was reserved for it): held until
  /// `add_reserved` tracks it or `unclaim` gives it up.
  void claim(const std::string& id, const std::string& to);

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
  reservation reserve(const outgoing& o);

  /// Whether nothing is outstanding: unconfirmed, being recorded, or room
  /// reserved (the sender may passivate; its work mark may go).
  bool idle() const;

  /// Resumed with nothing outstanding: a mark left behind goes, under the
  /// lock that orders its clearing before any later reservation's mark.
  void clear_mark_if_idle();

  /// Whether its timer waits for a delivery due again (false once nothing
  /// is unconfirmed and the last wait has ended: it wakes for nothing).
  bool timer_waits() const;

  /// The sender's mark in the work index (set while it has unconfirmed
  /// deliveries), and its clearing.
  persistence::table_write work_mark() const;
  persistence::table_write work_clear() const;

  /// Gives up a claim and its reserved room (its record was not written).
  void unclaim(const std::string& id);

  /// One delivery whose intent is durable (it was reserved);
  /// `carried_mark`: its write carried the work mark. Past its horizon
  /// already (its write, or room for it, took that long): never sent, a
  /// dead letter.
  void add_reserved(outgoing o, bool carried_mark = false);

  /// One copy per sender and ID waits in the mailbox at most: while it
  /// waits, later copies (redeliveries) are dropped, so a slow receiver's
  /// mailbox does not fill with redeliveries of what it has not reached yet.
  void receive(message m) override;

  /// The actor took `m` out of its mailbox.
  void dequeued(const message& m);

  /// Confirms the delivery: forgotten at once, its record removed with the
  /// store's next write (`journal::write_later`). Should a crash come
  /// first, the delivery is sent again after the restart and answered from
  /// the receiver's dedup mark.
  void acknowledge(acknowledgement a) override;

  /// The receiver will never process the delivery (it may have forgotten
  /// it; see `acknowledgement::expired`): a dead letter, as one past its
  /// horizon, its ID claimed until the dead letter is written.
  void expired(acknowledgement a);

  /// Whether the delivery `id` is tracked (recorded, not yet confirmed).
  bool unconfirmed(const std::string& id) const;

  delivery_stats stats() const;

private:
  using waiter = troupe::detail::unique_function<void(std::error_code)>;

  using schedule_map = std::multimap<clock::time_point, std::string>;

  struct entry {
    outgoing out;
    std::uint32_t attempts = 0;
    std::optional<schedule_map::iterator> slot; // in schedule_
  };

  /// With the mutex held: `e` (under `id`) is due again at `due`.
  void schedule(entry& e, const std::string& id, clock::time_point due);

  /// With the mutex held: nothing unconfirmed, being recorded or reserved.
  bool outstanding_none() const noexcept { return pending_.empty() && claimed_.empty() && reserved_ == 0; }

  /// With the mutex held: the receiver `id` is unconfirmed or being
  /// recorded to, or null.
  const std::string* holder_of(const std::string& id) const;

  /// With the mutex held. A released claim's node is kept for the next
  /// claim (one delivery after another costs no allocation for it).
  void claim_locked(const std::string& id, const std::string& to);

  /// With the mutex held.
  void release_claim(const std::string& id);

  /// With the mutex held.
  void forget(typename std::unordered_map<std::string, entry>::iterator it);

  /// Copies are told apart by sender and ID (each sender gets its
  /// acknowledgement), by a 64-bit hash of both: should two waiting
  /// deliveries ever share it, the later one's copy is dropped and sent
  /// again by its sender, as any dropped copy is.
  static std::uint64_t queue_key(const message& m);

  void add(std::vector<outgoing> out);

  /// The library's own deliveries (effect outcomes) are never given up:
  /// redelivered at the capped interval until confirmed.
  static bool own(const outgoing& o) noexcept { return std::string_view(o.manifest).starts_with("troupe."); }

  /// Whether `o` was first recorded longer than the horizon before `now_ms`
  /// (wall clock, as its record's time): it must not be sent any more.
  bool past_horizon(const outgoing& o, std::int64_t now_ms) const noexcept;

  /// With the mutex held: tracks `o`, due again after the first backoff,
  /// and gives the message to send now — none if a delivery under its ID
  /// is unconfirmed already (then it is that delivery).
  std::optional<message> track(outgoing&& o, clock::time_point t);

  message to_message(const outgoing& o) const;

  clock::duration backoff(std::uint32_t attempts);

  /// With the mutex held: the timer waits for the earliest delivery due
  /// again (at least a tick from now, so that what is due together goes
  /// together), and is idle when none is (a tracker with nothing
  /// unconfirmed — most of them, in a process with many finished actors —
  /// costs no timer, one waiting out a long backoff wakes once).
  void arm();

  void tick();

  /// Moves a delivery to the dead letters, atomically. Its ID is claimed
  /// meanwhile (no longer pending in memory, still pending in the store): a
  /// delivery under it to another receiver is refused until the dead letter
  /// is written, as after.
  void bury(outgoing o, std::uint32_t attempts);

  void buried(outgoing o, std::uint32_t attempts, std::int64_t since, std::error_code ec);

  const std::string pid_;
  const std::string prefix_;
  std::shared_ptr<persistence::journal> journal_;
  const detail::tables tables_;
  std::shared_ptr<transport> net_;
  std::unique_ptr<owner_link> owner_;
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

#if defined(TROUPE_HEADER_ONLY)
#include <troupe/delivery/impl/outgoing_tracker.ipp>
#endif
