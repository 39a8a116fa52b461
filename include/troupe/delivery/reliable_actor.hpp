#pragma once

/// \file
/// `troupe::delivery::reliable_actor`: a persistent actor that delivers
/// messages at least once and processes each delivery ID's effects exactly
/// once. See docs/delivery.md.

#include <troupe/actor_system.hpp>
#include <troupe/context.hpp>
#include <troupe/error.hpp>
#include <troupe/task.hpp>
#include <troupe/delivery/delivery_id.hpp>
#include <troupe/delivery/transport.hpp>
#include <troupe/persistence/persistent_actor.hpp>
#include <troupe/persistence/detail/codec.hpp>
#include <troupe/detail/json_text.hpp>
#include <troupe/detail/stored_handler.hpp>
#include <troupe/detail/unique_function.hpp>

#include <asio/async_result.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
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

namespace troupe::delivery {

/// A message type that can be delivered: like an event, JSON-convertible
/// with a stable `manifest` (and optional `version`).
template <class M>
concept message_type = persistence::event<M>;

/// The message types a reliable actor accepts as `delivery<M>`.
template <message_type... M>
struct accepts {};

/// What a receiver's handler gets: the delivery ID (the same on every
/// attempt), the sender's name and the message.
template <class M>
struct delivery {
  delivery_id id;
  std::string sender;
  M message;
};

/// Told to a sender that handles it, once a delivery is confirmed, with the
/// receiver's reply (JSON text) if its handler returned one. A notification:
/// not repeated if the sender crashes right after the confirmation.
struct confirmed {
  delivery_id id;
  std::string to;
  std::optional<std::string> reply;

  /// The reply as an `R` (throws if there is none or it does not convert).
  template <class R>
  R reply_as() const {
    if (!reply) throw error(errc::invalid_argument, "delivery " + id.str() + " was confirmed without a reply");
    return troupe::detail::from_json_text<R>(*reply);
  }
};

/// Told to a sender that handles it when a delivery reaches
/// `redelivery_policy::warn_after` attempts.
struct redelivery_warning {
  delivery_id id;
  std::string to;
  std::uint32_t attempts = 0;
};

/// A delivery given up after `redelivery_policy::max_attempts`.
struct dead_letter {
  delivery_id id;
  std::string to;
  std::string manifest;
  std::uint32_t attempts = 0;
  /// When it was given up, in milliseconds since the epoch.
  std::int64_t since_ms = 0;
};

/// Told to a sender that handles it when a delivery becomes a dead letter
/// (the threshold callback).
struct delivery_failed {
  dead_letter letter;
};

/// Operator messages, handled by every reliable actor. `ask` them:
/// - `list_dead_letters{}` → `std::vector<dead_letter>`;
/// - `requeue{id}` → `bool` (false: no such dead letter): the delivery is
///   pending again, with a fresh count of attempts, and sent at once;
/// - `delivery_status{}` → `delivery_stats`.
struct list_dead_letters {};
struct requeue {
  delivery_id id;
};
struct delivery_status {};

/// Counters of one reliable actor since it (re)started.
struct delivery_stats {
  /// Deliveries recorded and not yet confirmed or given up.
  std::size_t unconfirmed = 0;
  std::uint64_t sent = 0, resent = 0, confirmed = 0, dead_lettered = 0;
  /// Deliveries received and processed (first arrivals), and duplicates
  /// answered from the dedup marks.
  std::uint64_t processed = 0, duplicates = 0;
  /// Deliveries received whose message type this actor does not accept or
  /// whose payload does not parse (not acknowledged).
  std::uint64_t rejected = 0;
};

/// How a sender redelivers what is not confirmed.
struct redelivery_policy {
  /// Wait after the first attempt; doubles after each further one, up to
  /// `max_backoff`, each wait varied by ±`jitter` (a fraction).
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{30'000};
  double jitter = 0.2;
  /// Redeliveries sent per timer tick at most (the tick is half the initial
  /// backoff, between 1 ms and 1 s).
  std::size_t burst = 1000;
  /// A `redelivery_warning` after this many attempts (0: never).
  std::uint32_t warn_after = 5;
  /// Attempts before the delivery becomes a dead letter (0: never).
  std::uint32_t max_attempts = 100;
  /// Deliveries recorded and not yet confirmed, at most; past it `deliver`
  /// throws `errc::delivery_backlog_full`, or waits if `wait_when_full`.
  std::size_t max_unconfirmed = 10'000;
  bool wait_when_full = false;

  /// How long after its first attempt a delivery may still be redelivered.
  std::chrono::milliseconds horizon() const noexcept {
    if (max_attempts == 0) return std::chrono::milliseconds::max();
    return max_backoff * max_attempts;
  }
};

/// How long a receiver remembers the delivery IDs it processed.
struct dedup_policy {
  /// Dedup marks older than this are removed; a delivery arriving after its
  /// mark was removed is processed again. Must be at least the redelivery
  /// horizon of every sender (checked for the senders of the same
  /// transport). `max()`: forever.
  std::chrono::milliseconds retention{std::chrono::hours(24)};
  /// How often old marks are removed, and how many at most each time.
  std::chrono::milliseconds sweep_interval{std::chrono::minutes(1)};
  std::size_t sweep_batch = 10'000;
};

struct delivery_options {
  redelivery_policy redelivery;
  dedup_policy dedup;
};

namespace detail {

/// Told to a receiver by its endpoint.
struct inbound {
  message msg;
};
/// Told to a receiver by its sweep timer.
struct sweep_tick {};

inline std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// Keys: the persistence ID with a 2-byte length, then (in `deliveries`) 'p'
/// for pending or 'x' for dead letters, then the delivery ID.
inline std::string key_prefix(std::string_view pid) {
  std::string k;
  k.reserve(2 + pid.size() + 1);
  k += static_cast<char>((pid.size() >> 8) & 0xff);
  k += static_cast<char>(pid.size() & 0xff);
  k += pid;
  return k;
}

/// `prefix` (a `key_prefix`), then `kind` unless it is 0, then `id`: built
/// in one allocation.
inline std::string key(std::string_view prefix, char kind, std::string_view id) {
  std::string k;
  k.reserve(prefix.size() + 1 + id.size());
  k += prefix;
  if (kind != 0) k += kind;
  k += id;
  return k;
}

/// A delivery recorded and not yet confirmed.
struct outgoing {
  std::string to;
  std::string id;
  std::string manifest;
  std::uint32_t version = 1;
  std::string payload;
  std::int64_t created_ms = 0;
};

/// Table values: a format byte, then big-endian fields (see docs/delivery.md).
inline constexpr char value_format = 1;

/// A pending delivery (`dead_ms` 0) or a dead letter.
inline std::string encode_outgoing(const outgoing& o, std::uint32_t attempts = 0, std::int64_t dead_ms = 0) {
  using namespace persistence::detail;
  std::string v;
  v.reserve(1 + 4 + o.to.size() + 4 + o.manifest.size() + 4 + 8 + 4 + 8 + o.payload.size());
  v.push_back(value_format);
  put_u32(v, static_cast<std::uint32_t>(o.to.size()));
  v += o.to;
  put_u32(v, static_cast<std::uint32_t>(o.manifest.size()));
  v += o.manifest;
  put_u32(v, o.version);
  put_u64(v, static_cast<std::uint64_t>(o.created_ms));
  put_u32(v, attempts);
  put_u64(v, static_cast<std::uint64_t>(dead_ms));
  v += o.payload;
  return v;
}

inline error bad_value(std::string_view what) {
  return error(errc::corrupt_record, "unreadable " + std::string(what) + " record in the delivery tables");
}

/// Reads `n` bytes at `at`, or throws `corrupt_record`.
inline std::string_view take(std::string_view v, std::size_t& at, std::size_t n, std::string_view what) {
  if (at > v.size() || v.size() - at < n) throw bad_value(what);
  auto out = v.substr(at, n);
  at += n;
  return out;
}

inline outgoing decode_outgoing(std::string_view id, std::string_view v, std::uint32_t* attempts = nullptr,
                                std::int64_t* dead_ms = nullptr) {
  using persistence::detail::get_be;
  constexpr std::string_view what = "delivery";
  std::size_t at = 0;
  if (take(v, at, 1, what)[0] != value_format) throw bad_value(what);
  outgoing o;
  o.id = id;
  o.to = take(v, at, get_be(take(v, at, 4, what), 0, 4), what);
  o.manifest = take(v, at, get_be(take(v, at, 4, what), 0, 4), what);
  o.version = static_cast<std::uint32_t>(get_be(take(v, at, 4, what), 0, 4));
  o.created_ms = static_cast<std::int64_t>(get_be(take(v, at, 8, what), 0, 8));
  const auto a = static_cast<std::uint32_t>(get_be(take(v, at, 4, what), 0, 4));
  const auto d = static_cast<std::int64_t>(get_be(take(v, at, 8, what), 0, 8));
  o.payload = v.substr(at);
  if (attempts) *attempts = a;
  if (dead_ms) *dead_ms = d;
  return o;
}

/// A dedup mark: when the delivery was processed, and the reply.
inline std::string encode_mark(std::int64_t time_ms, const std::optional<std::string>& reply) {
  std::string v;
  v.reserve(1 + 8 + 1 + (reply ? reply->size() : 0));
  v.push_back(value_format);
  persistence::detail::put_u64(v, static_cast<std::uint64_t>(time_ms));
  v.push_back(reply ? 1 : 0);
  if (reply) v += *reply;
  return v;
}

inline std::int64_t decode_mark(std::string_view v, std::optional<std::string>& reply) {
  constexpr std::string_view what = "dedup";
  std::size_t at = 0;
  if (take(v, at, 1, what)[0] != value_format) throw bad_value(what);
  const auto time_ms = static_cast<std::int64_t>(persistence::detail::get_be(take(v, at, 8, what), 0, 8));
  if (take(v, at, 1, what)[0] != 0) reply = std::string(v.substr(at));
  return time_ms;
}

/// A sender's unconfirmed deliveries, shared by the actor (which adds them
/// once durable), the redelivery timer and the acknowledgements (which may
/// arrive while the actor is busy): so acknowledgements free capacity even
/// while a handler waits for it. Also the actor's endpoint on the transport.
template <class Actor>
class link final : public endpoint, public std::enable_shared_from_this<link<Actor>> {
public:
  using clock = std::chrono::steady_clock;

  link(std::string pid, std::shared_ptr<persistence::journal> j, std::shared_ptr<transport> net, actor_ref<Actor> self,
       redelivery_policy policy, asio::any_io_executor ex)
      : pid_(std::move(pid)), prefix_(key_prefix(pid_)), journal_(std::move(j)), net_(std::move(net)),
        self_(std::move(self)), policy_(policy), timer_(std::in_place, ex), rng_(std::hash<std::string>{}(pid_) ^ now_ms()) {
    const auto half = policy_.initial_backoff / 2;
    tick_ = std::clamp<std::chrono::milliseconds>(std::chrono::duration_cast<std::chrono::milliseconds>(half),
                                                  std::chrono::milliseconds(1), std::chrono::milliseconds(1000));
  }

  std::string pending_key(std::string_view id) const { return key(prefix_, 'p', id); }
  std::string dead_key(std::string_view id) const { return key(prefix_, 'x', id); }
  const std::string& prefix() const noexcept { return prefix_; }

  /// Binds the endpoint, and sends what recovery found pending at once.
  void start(std::vector<outgoing> recovered) {
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
      // outlive it, while the link may (a write's callback can hold it).
      timer_.reset();
      ws.swap(waiters_);
    }
    net_->unbind(pid_, this);
    for (auto& w : ws) w(make_error_code(errc::actor_stopped));
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
            h->post(make_error_code(errc::actor_stopped));
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

  /// Deliveries whose intent is durable (they were reserved): tracked and
  /// sent now.
  void add_reserved(std::vector<outgoing> out) {
    {
      std::lock_guard g(mutex_);
      reserved_ -= std::min(out.size(), reserved_);
    }
    add(std::move(out));
  }

  /// One delivery whose intent is durable (it was reserved).
  void add_reserved(outgoing o) {
    std::optional<message> m;
    {
      std::lock_guard g(mutex_);
      reserved_ -= std::min<std::size_t>(1, reserved_);
      if (closed_) return;
      m = track(std::move(o), clock::now());
    }
    if (m) net_->send(std::move(*m));
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
    std::vector<waiter> ws;
    {
      std::lock_guard g(mutex_);
      auto it = pending_.find(a.id.str());
      if (it == pending_.end()) return; // repeated or late: harmless
      forget(it);
      ++stats_.confirmed;
      ws.swap(waiters_);
    }
    std::vector<persistence::table_write> tables;
    tables.push_back(persistence::table_write::erase(persistence::table::deliveries, pending_key(a.id.str())));
    journal_->write_later(std::move(tables));
    for (auto& w : ws) w({});
    if constexpr (handles<Actor, confirmed>) (void)self_.tell(confirmed{std::move(a.id), std::move(a.from), std::move(a.reply)});
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
    {
      std::lock_guard g(mutex_);
      if (closed_) return;
      const auto t = clock::now();
      for (auto& o : out)
        if (auto m = track(std::move(o), t)) now.push_back(std::move(*m));
    }
    for (auto& m : now) net_->send(std::move(m));
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
    return message{o.to, pid_, delivery_id(o.id), o.manifest, o.version, o.payload};
  }

  clock::duration backoff(std::uint32_t attempts) {
    auto d = policy_.initial_backoff;
    for (std::uint32_t i = 1; i < attempts && d < policy_.max_backoff; ++i) d *= 2;
    d = std::min(d, policy_.max_backoff);
    if (policy_.jitter > 0) {
      const double f = 1 + std::uniform_real_distribution<double>(-policy_.jitter, policy_.jitter)(rng_);
      return std::chrono::duration_cast<clock::duration>(std::chrono::duration<double, std::milli>(d.count() * f));
    }
    return d;
  }

  /// With the mutex held.
  void arm() {
    if (closed_) return;
    timer_->expires_after(tick_);
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
      if (closed_) return;
      const auto t = clock::now();
      // Only what is due, earliest first.
      while (!schedule_.empty() && schedule_.begin()->first <= t && resend.size() < policy_.burst) {
        auto it = pending_.find(schedule_.begin()->second);
        schedule_.erase(schedule_.begin());
        if (it == pending_.end()) continue;
        auto& e = it->second;
        e.slot.reset();
        if (policy_.max_attempts != 0 && e.attempts >= policy_.max_attempts) {
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

  /// Moves a delivery to the dead letters, atomically.
  void bury(outgoing o, std::uint32_t attempts) {
    const auto since = now_ms();
    std::vector<persistence::table_write> tables;
    tables.push_back(persistence::table_write::erase(persistence::table::deliveries, pending_key(o.id)));
    tables.push_back(
        persistence::table_write::put(persistence::table::deliveries, dead_key(o.id), encode_outgoing(o, attempts, since)));
    journal_->write({}, {}, std::move(tables),
                    [self = this->shared_from_this(), o = std::move(o), attempts, since](std::error_code ec) mutable {
                      self->buried(std::move(o), attempts, since, ec);
                    });
  }

  void buried(outgoing o, std::uint32_t attempts, std::int64_t since, std::error_code ec) {
    std::vector<waiter> ws;
    {
      std::lock_guard g(mutex_);
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
      ws.swap(waiters_);
    }
    for (auto& w : ws) w({});
    if constexpr (handles<Actor, delivery_failed>)
      (void)self_.tell(delivery_failed{dead_letter{delivery_id(o.id), o.to, o.manifest, attempts, since}});
  }

  const std::string pid_;
  const std::string prefix_;
  std::shared_ptr<persistence::journal> journal_;
  std::shared_ptr<transport> net_;
  actor_ref<Actor> self_;
  const redelivery_policy policy_;
  std::chrono::milliseconds tick_;

  mutable std::mutex mutex_;
  std::optional<asio::steady_timer> timer_;
  std::minstd_rand rng_;
  std::unordered_map<std::string, entry> pending_;
  schedule_map schedule_; // pending deliveries by the time they are due again
  std::unordered_set<std::uint64_t> queued_; // received (sender, ID) (queue_key), waiting in the mailbox
  std::size_t reserved_ = 0;
  std::vector<waiter> waiters_;
  delivery_stats stats_;
  bool closed_ = false;
};

} // namespace detail

/// Base of a persistent actor that sends and receives reliable deliveries.
///
/// **Sending.** `co_await deliver(to, id, msg, events...)` records the
/// delivery with the events that cause it, in one atomic write (an intent is
/// never lost, and never sent before it is durable), then sends it. Until
/// the receiver acknowledges, it is redelivered with the same ID
/// (`redelivery_policy`); after a restart, what is unconfirmed is sent again
/// once recovery has completed — never during replay. An acknowledgement
/// removes the record durably; repeated ones are harmless.
///
/// **Receiving.** `Derived` lists the message types it accepts
/// (`using accepts = troupe::delivery::accepts<picklist>;`) and handles each
/// as `handle(troupe::delivery::delivery<picklist>)` — synchronous or a
/// coroutine, returning nothing or a JSON-convertible reply. The first
/// arrival of an ID runs the handler as one unit of work: the events it
/// persists are applied at once and written when it returns, in one atomic
/// write with the dedup mark (and the reply, and the deliveries it made);
/// the acknowledgement goes out once that write is durable. A duplicate is
/// acknowledged again with the stored reply; the handler does not run. If
/// the handler throws, nothing of it is written and nothing acknowledged
/// (the sender redelivers; an instance whose state already holds the
/// unwritten events refuses further persists and must restart).
///
/// Inside a delivery handler, tell other actors nothing that depends on the
/// unit's events (they are not durable until it returns); deliver instead.
///
/// The actor's name on the transport is its persistence ID.
template <class Derived, class State>
class reliable_actor : public persistence::persistent_actor<Derived, State> {
  using base = persistence::persistent_actor<Derived, State>;

public:
  reliable_actor(context<Derived> ctx, persistence::persistence_id id, delivery_options options = {},
                 persistence::persistence_options persistence = {})
      : base(ctx, std::move(id), persistence), ctx_(ctx), options_(options), net_(transport_of(ctx.system())) {
    const auto& r = options_.redelivery;
    const auto& d = options_.dedup;
    if (r.initial_backoff.count() <= 0 || r.max_backoff < r.initial_backoff)
      throw error(errc::invalid_argument, "reliable actor " + this->pid() +
                                              ": redelivery backoff must be positive, and max_backoff >= initial_backoff");
    if (!(r.jitter >= 0 && r.jitter < 1))
      throw error(errc::invalid_argument, "reliable actor " + this->pid() + ": redelivery jitter must be in [0, 1)");
    if (r.burst == 0 || r.max_unconfirmed == 0)
      throw error(errc::invalid_argument,
                  "reliable actor " + this->pid() + ": redelivery burst and max_unconfirmed must be at least 1");
    if (d.sweep_interval.count() <= 0 || d.sweep_batch == 0)
      throw error(errc::invalid_argument,
                  "reliable actor " + this->pid() + ": dedup sweep_interval and sweep_batch must be positive");
    std::optional<std::chrono::milliseconds> retention;
    if constexpr (receives()) retention = d.retention;
    net_->admit(this->pid(), r.horizon(), retention);
  }

  reliable_actor(const reliable_actor&) = delete;
  reliable_actor& operator=(const reliable_actor&) = delete;

  ~reliable_actor() {
    if (link_) link_->close();
  }

  /// Recovery, then the deliveries left unconfirmed are sent again and the
  /// receiver's dedup marks loaded, then `Derived::on_recovery_completed()`.
  task<> on_start() {
    co_await this->recover_state();
    std::vector<detail::outgoing> pending;
    auto load_all = [this, &pending] { load(pending); };
    co_await this->on_journal_thread(load_all);
    link_ = std::make_shared<detail::link<Derived>>(this->pid(), this->storage_ptr(), net_, ctx_.self(),
                                                    options_.redelivery, ctx_.get_executor());
    link_->start(std::move(pending));
    if constexpr (receives()) ctx_.schedule_every(options_.dedup.sweep_interval, detail::sweep_tick{});
    co_await this->recovery_completed();
  }

  // -- messages of the layer (a `handle` in Derived does not hide these) --

  task<> troupe_handle(detail::inbound in) {
    auto& m = in.msg;
    link_->dequeued(m);
    if (auto it = dedup_.find(m.id.str()); it != dedup_.end()) {
      ++duplicates_;
      net_->send(acknowledgement{m.from, this->pid(), m.id, it->second.reply});
      co_return;
    }
    using receive_fn = task<> (reliable_actor::*)(message&);
    receive_fn f = nullptr;
    select(typename accepted_of<Derived>::type{}, m, f);
    if (!f) {
      ++rejected_;
      co_return;
    }
    co_await (this->*f)(m);
  }

  task<> troupe_handle(detail::sweep_tick) {
    const auto horizon = options_.dedup.retention;
    if (horizon == std::chrono::milliseconds::max()) co_return;
    const auto cutoff = detail::now_ms() - horizon.count();
    std::vector<persistence::table_write> tables;
    while (!dedup_order_.empty() && tables.size() < options_.dedup.sweep_batch &&
           dedup_order_.front().first < cutoff) {
      auto id = std::move(dedup_order_.front().second);
      dedup_order_.pop_front();
      auto it = dedup_.find(id);
      if (it == dedup_.end() || it->second.time_ms >= cutoff) continue;
      dedup_.erase(it);
      tables.push_back(persistence::table_write::erase(persistence::table::dedup, dedup_key(id)));
    }
    if (!tables.empty()) co_await this->persist_all_with(std::move(tables));
  }

  task<std::vector<dead_letter>> troupe_handle(list_dead_letters) {
    std::vector<dead_letter> out;
    auto scan_dead = [this, &out] {
      const auto prefix = link_->prefix() + 'x';
      auto ec = this->storage().scan(persistence::table::deliveries, prefix, [&](std::string_view k, std::string_view v) {
        std::uint32_t attempts = 0;
        std::int64_t since = 0;
        auto o = detail::decode_outgoing(k.substr(prefix.size()), v, &attempts, &since);
        out.push_back({delivery_id(o.id), o.to, o.manifest, attempts, since});
        return true;
      });
      if (ec) throw error(errc::storage_failure, "listing the dead letters of " + this->pid() + ": " + ec.message());
    };
    co_await this->on_journal_thread(scan_dead);
    co_return out;
  }

  task<bool> troupe_handle(requeue r) {
    std::optional<std::string> value;
    const auto key = link_->dead_key(r.id.str());
    auto read = [&] {
      if (auto ec = this->storage().get(persistence::table::deliveries, key, value))
        throw error(errc::storage_failure, "reading dead letter " + r.id.str() + ": " + ec.message());
    };
    co_await this->on_journal_thread(read);
    if (!value) co_return false;
    auto o = detail::decode_outgoing(r.id.str(), *value);
    if (!link_->try_reserve(1)) co_await wait_for_room(1);
    std::vector<persistence::table_write> tables;
    tables.push_back(persistence::table_write::erase(persistence::table::deliveries, key));
    tables.push_back(persistence::table_write::put(persistence::table::deliveries, link_->pending_key(o.id),
                                                   detail::encode_outgoing(o)));
    try {
      co_await this->persist_all_with(std::move(tables));
    } catch (...) {
      link_->unreserve(1);
      throw;
    }
    link_->add_reserved(std::move(o));
    co_return true;
  }

  delivery_stats troupe_handle(delivery_status) const {
    auto s = link_ ? link_->stats() : delivery_stats{};
    s.processed = processed_;
    s.duplicates = duplicates_;
    s.rejected = rejected_;
    return s;
  }

protected:
  /// Records the delivery of `msg` to the reliable actor named `to` under
  /// `id`, atomically with `cause` (the events that cause it; none is
  /// allowed), and sends it once durable. In a delivery handler it joins
  /// the handler's unit of work and is sent after it. Throws as `persist`
  /// does, and `errc::delivery_backlog_full` when the sender already has
  /// `max_unconfirmed` deliveries outstanding (unless `wait_when_full`: then
  /// it waits for room). A second delivery under an ID still unconfirmed is
  /// the same delivery (sent once).
  template <message_type M, persistence::event... E>
  task<> deliver(std::string to, delivery_id id, M msg, E... cause) {
    if (to.empty()) throw error(errc::invalid_argument, "deliver from " + this->pid() + ": the receiver name is empty");
    detail::outgoing o;
    o.to = std::move(to);
    o.id = id.str();
    o.manifest = std::string(M::manifest);
    o.version = persistence::version_of<M>();
    try {
      o.payload = troupe::detail::to_json_text(msg);
    } catch (const std::exception& ex) {
      throw error(errc::invalid_argument, "cannot serialize " + o.manifest + " for delivery " + o.id + ": " + ex.what());
    }
    o.created_ms = detail::now_ms();
    if (!link_->try_reserve(1)) co_await wait_for_room(1);
    std::vector<persistence::table_write> tables;
    tables.push_back(persistence::table_write::put(persistence::table::deliveries, link_->pending_key(o.id),
                                                   detail::encode_outgoing(o)));
    try {
      co_await this->persist_all_with(std::move(tables), std::move(cause)...);
    } catch (...) {
      link_->unreserve(1);
      throw;
    }
    if (this->in_unit()) {
      unit_out_.push_back(std::move(o));
      co_return;
    }
    link_->add_reserved(std::move(o));
  }

  const delivery_options& delivery_settings() const noexcept { return options_; }

  /// Opens a batch outside a delivery handler: until `commit_batch`, the
  /// persists and deliveries of the handler are applied and staged, then
  /// written in one atomic write with `tables`; the deliveries are sent and
  /// the `after_commit` actions run once it is durable. (A delivery
  /// handler is such a batch already.)
  void begin_batch() { this->begin_unit(); }

  task<> commit_batch(std::vector<persistence::table_write> tables = {}) {
    auto out = std::move(unit_out_);
    unit_out_.clear();
    auto then = std::move(after_commit_);
    after_commit_.clear();
    try {
      co_await this->commit_unit(std::move(tables));
    } catch (...) {
      link_->unreserve(out.size());
      throw;
    }
    link_->add_reserved(std::move(out));
    for (auto& f : then) f();
  }

  /// Drops an open batch (see `persistent_actor::abort_unit`).
  void abort_batch() noexcept {
    link_->unreserve(unit_out_.size());
    unit_out_.clear();
    after_commit_.clear();
    this->abort_unit();
  }

  /// Runs `f` once what the handler persisted so far is durable: now
  /// outside a batch, after the batch's write inside one (never if it
  /// fails).
  void after_commit(troupe::detail::unique_function<void()> f) {
    if (this->in_unit())
      after_commit_.push_back(std::move(f));
    else
      f();
  }

private:
  template <class... A, class... B>
  static accepts<A..., B...> join(accepts<A...>, accepts<B...>);
  template <class X>
  struct own_accepted {
    using type = accepts<>;
  };
  template <class X>
    requires requires { typename X::accepts; }
  struct own_accepted<X> {
    using type = typename X::accepts;
  };
  template <class X>
  struct library_accepted {
    using type = accepts<>;
  };
  template <class X>
    requires requires { typename X::troupe_accepts; }
  struct library_accepted<X> {
    using type = typename X::troupe_accepts;
  };
  /// What `Derived` accepts, and what a library base class between it and
  /// this one accepts (`troupe_accepts`, handled by `troupe_handle`).
  template <class X>
  struct accepted_of {
    using type = decltype(join(typename own_accepted<X>::type{}, typename library_accepted<X>::type{}));
  };
  static constexpr bool receives_of(accepts<>) { return false; }
  template <class... M>
  static constexpr bool receives_of(accepts<M...>) {
    return true;
  }
  // Only inside member functions, where Derived is complete.
  static constexpr bool receives() { return receives_of(typename accepted_of<Derived>::type{}); }

  struct mark {
    std::optional<std::string> reply;
    std::int64_t time_ms = 0;
  };

  static std::shared_ptr<transport> transport_of(actor_system& sys) {
    auto t = sys.extension<transport>();
    if (!t)
      throw error(errc::invalid_argument,
                  "no delivery transport attached to the actor system: call troupe::delivery::attach(system) before "
                  "spawning " + std::string(troupe::detail::type_name<Derived>()));
    return t;
  }

  std::string dedup_key(std::string_view id) const { return detail::key(link_->prefix(), 0, id); }

  /// On the journal's thread: the pending deliveries and the dedup marks.
  void load(std::vector<detail::outgoing>& pending) {
    const auto prefix = detail::key_prefix(this->pid());
    const auto pending_prefix = prefix + 'p';
    auto ec = this->storage().scan(persistence::table::deliveries, pending_prefix,
                                   [&](std::string_view k, std::string_view v) {
                                     pending.push_back(detail::decode_outgoing(k.substr(pending_prefix.size()), v));
                                     return true;
                                   });
    if (ec) throw error(errc::storage_failure, "loading the deliveries of " + this->pid() + ": " + ec.message());
    if constexpr (receives()) {
      std::vector<std::pair<std::int64_t, std::string>> order;
      ec = this->storage().scan(persistence::table::dedup, prefix, [&](std::string_view k, std::string_view v) {
        mark mk;
        mk.time_ms = detail::decode_mark(v, mk.reply);
        std::string id(k.substr(prefix.size()));
        order.emplace_back(mk.time_ms, id);
        dedup_.emplace(std::move(id), std::move(mk));
        return true;
      });
      if (ec) throw error(errc::storage_failure, "loading the dedup marks of " + this->pid() + ": " + ec.message());
      std::sort(order.begin(), order.end());
      dedup_order_.assign(std::make_move_iterator(order.begin()), std::make_move_iterator(order.end()));
    }
  }

  template <class... M>
  void select(accepts<M...>, const message& m, task<> (reliable_actor::*&f)(message&)) {
    (void)((m.manifest == M::manifest && m.version == persistence::version_of<M>()
                ? (f = &reliable_actor::receive_as<M>, true)
                : false) ||
           ...);
  }

  /// The first arrival of a delivery of an `M`.
  template <class M>
  task<> receive_as(message& m) {
    static_assert(handles<Derived, delivery<M>>,
                  "troupe: a reliable actor that accepts M needs handle(troupe::delivery::delivery<M>)");
    std::optional<M> msg;
    try {
      msg.emplace(troupe::detail::from_json_text<M>(m.payload));
    } catch (const std::exception&) {
      ++rejected_;
      co_return;
    }
    delivery<M> d{m.id, m.from, std::move(*msg)};
    this->begin_unit();
    std::optional<std::string> reply;
    try {
      using R = reply_type_t<Derived, delivery<M>>;
      auto& self = static_cast<Derived&>(*this);
      using troupe::detail::invoke_handle;
      if constexpr (coroutine_handler<Derived, delivery<M>>) {
        if constexpr (std::is_void_v<R>) {
          co_await invoke_handle(self, std::move(d));
        } else {
          R r = co_await invoke_handle(self, std::move(d));
          reply = troupe::detail::to_json_text(r);
        }
      } else {
        if constexpr (std::is_void_v<R>) {
          invoke_handle(self, std::move(d));
        } else {
          R r = invoke_handle(self, std::move(d));
          reply = troupe::detail::to_json_text(r);
        }
      }
    } catch (...) {
      abort_batch();
      throw;
    }
    mark mk{reply, detail::now_ms()};
    std::vector<persistence::table_write> tables;
    tables.push_back(
        persistence::table_write::put(persistence::table::dedup, dedup_key(m.id.str()), detail::encode_mark(mk.time_ms, reply)));
    co_await commit_batch(std::move(tables));
    ++processed_;
    dedup_order_.emplace_back(mk.time_ms, m.id.str());
    dedup_.emplace(m.id.str(), std::move(mk));
    net_->send(acknowledgement{m.from, this->pid(), m.id, std::move(reply)});
  }

  /// Reserves room for `n` deliveries once the link has it (the caller
  /// tried `try_reserve` first, so the common case costs no coroutine).
  task<> wait_for_room(std::size_t n) {
    do {
      if (!options_.redelivery.wait_when_full)
        throw error(errc::delivery_backlog_full,
                    this->pid() + " has " + std::to_string(options_.redelivery.max_unconfirmed) +
                        " unconfirmed deliveries (redelivery_policy::max_unconfirmed)");
      auto [ec] = co_await link_->wait_for_room(asio::experimental::as_tuple(asio::use_awaitable));
      if (ec) throw error(errc::actor_stopped, this->pid() + " stopped while waiting to deliver");
    } while (!link_->try_reserve(n));
  }

  context<Derived> ctx_;
  delivery_options options_;
  std::shared_ptr<transport> net_;
  std::shared_ptr<detail::link<Derived>> link_;
  std::vector<detail::outgoing> unit_out_;
  std::vector<troupe::detail::unique_function<void()>> after_commit_;
  std::unordered_map<std::string, mark> dedup_;
  std::deque<std::pair<std::int64_t, std::string>> dedup_order_;
  std::uint64_t processed_ = 0, duplicates_ = 0, rejected_ = 0;
};

} // namespace troupe::delivery
