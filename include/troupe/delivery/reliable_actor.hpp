#pragma once

/// \file
/// `troupe::delivery::reliable_actor`: a persistent actor that delivers
/// messages at least once and processes each delivery ID's effects exactly
/// once. See docs/delivery.md.

#include <troupe/actor_system.hpp>
#include <troupe/context.hpp>
#include <troupe/error.hpp>
#include <troupe/hooks.hpp>
#include <troupe/task.hpp>
#include <troupe/delivery/delivery.hpp>
#include <troupe/delivery/delivery_id.hpp>
#include <troupe/delivery/error.hpp>
#include <troupe/delivery/operator.hpp>
#include <troupe/delivery/policy.hpp>
#include <troupe/delivery/transport.hpp>
#include <troupe/delivery/detail/codec.hpp>
#include <troupe/delivery/detail/dedup_marks.hpp>
#include <troupe/delivery/detail/outgoing_tracker.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/persistence/json.hpp>
#include <troupe/persistence/persistent_actor.hpp>
#include <troupe/detail/bytes.hpp>
#include <troupe/detail/cell_base.hpp>
#include <troupe/detail/clock.hpp>
#include <troupe/detail/maybe_await.hpp>
#include <troupe/detail/type_name.hpp>

#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <limits>
#include <utility>
#include <vector>

namespace troupe::delivery {

namespace detail {

template <class M, class List>
inline constexpr bool listed = false;
template <class M, class... Ms>
inline constexpr bool listed<M, accepts<Ms...>> = (std::is_same_v<M, Ms> || ...);

/// Instantiated only for a handler of `delivery<M>` whose `M` is not in
/// `List`: says so, naming both in the instantiation.
template <class M, class List>
struct handled_but_not_accepted {
  static_assert(listed<M, List>,
                "troupe: handle(troupe::delivery::delivery<M>) for a message M missing from the actor's accepts "
                "(every delivery of M would be rejected at run time): add M to "
                "`using accepts = troupe::delivery::accepts<...>`");
  static constexpr bool value = true;
};

/// Converts to the `delivery<M>` of a handler whose `M` is missing from
/// `List`: only handlers that take a `delivery<X>` deduce through it.
template <class List>
struct unaccepted_probe {
  template <class M>
    requires(!listed<M, List> && handled_but_not_accepted<M, List>::value)
  operator delivery<M>() const; // declared only: used in unevaluated operands
};

/// Once per actor system: the store drops the dedup marks whose receiver's
/// retention (as the transport knows it: by name while the receiver is
/// live, by prefix for entities) has passed.
struct dedup_expiry {
  static std::shared_ptr<dedup_expiry> install(persistence::journal& j, const tables& t,
                                               const std::shared_ptr<transport>& net) {
    j.set_expiry(t.dedup, [w = std::weak_ptr<transport>(net)](std::string_view key,
                                                               std::string_view value) -> std::optional<std::int64_t> {
      const auto n = troupe::detail::prefixed_length(key);
      if (n == 0 || n > key.size()) return std::nullopt;
      auto net = w.lock();
      if (!net) return std::nullopt;
      const auto retention = net->retention_of(key.substr(2, n - 2));
      if (!retention || *retention == std::chrono::milliseconds::max()) return std::nullopt;
      return decode_mark(value).time_ms + retention->count();
    });
    return std::make_shared<dedup_expiry>();
  }
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
/// arrival of an ID runs the handler as one batch: the events it persists
/// are applied at once and written when it returns, in one atomic write
/// with the dedup mark (and the reply, and the deliveries it made); the
/// acknowledgement goes out once that write is durable. A duplicate is
/// acknowledged again with the stored reply; the handler does not run. If
/// the handler throws, nothing of it is written and nothing acknowledged:
/// the failure is counted durably, the sender redelivers, and at
/// `max_handler_failures` the delivery is rejected (`delivery_rejected`); an
/// instance whose state holds the failed batch's events recovers its state
/// from the store in place, and goes on.
///
/// Inside a delivery handler, tell other actors nothing that depends on the
/// batch's events (they are not durable until it returns); deliver instead.
///
/// The actor's name on the transport is its persistence ID. Operator
/// messages (`list_dead_letters`, `requeue`, `delivery_status`) are handled
/// by every reliable actor.
template <class Derived, class State>
class reliable_actor : public persistence::persistent_actor<Derived, State> {
  using base = persistence::persistent_actor<Derived, State>;

  template <class... A, class... B>
  static accepts<A..., B...> join(accepts<A...>, accepts<B...>);

  /// What `X` accepts, and what a library base class between it and this
  /// one accepts (`troupe_accepts`, handled by `troupe_handle`). Used only
  /// where `Derived` is complete (member bodies, constraints checked at a
  /// call).
  template <class X>
  using accepted_of = decltype(join(typename troupe::detail::accepts_or<X, accepts<>>::type{},
                                    typename troupe::detail::troupe_accepts_or<X, accepts<>>::type{}));

public:
  // -- construction -------------------------------------------------------------

  /// As an entity of `delivery::entities<Derived>`: with the options given
  /// there; otherwise with the default options. Throws as the other.
  reliable_actor(context<Derived> ctx, persistence::persistence_id id, persistence::persistence_options persistence = {})
      : reliable_actor(ctx, std::move(id), std::optional<delivery_options>(), persistence, 0) {}

  /// Throws `invalid_argument` for an inconsistent policy, a dedup
  /// retention shorter than a sender's redelivery horizon
  /// (`transport::admit`), or, as an entity of `delivery::entities<Derived>`,
  /// other options than it was given (every activation has those: leave them
  /// out of the constructor).
  reliable_actor(context<Derived> ctx, persistence::persistence_id id, delivery_options options,
                 persistence::persistence_options persistence = {})
      : reliable_actor(ctx, std::move(id), std::optional<delivery_options>(options), persistence, 0) {}

private:
  reliable_actor(context<Derived> ctx, persistence::persistence_id id, std::optional<delivery_options> given,
                 persistence::persistence_options persistence, int)
      : base(ctx, std::move(id), persistence), options_(settle(ctx.system(), this->pid(), given)),
        net_(transport_of(ctx.system())), tables_(detail::tables::of(this->storage())),
        marks_(options_.dedup.cached_marks) {
    // Every handle(delivery<M>) of Derived has its M in accepts (the error
    // names M otherwise).
    static_assert(!requires(Derived& d) { d.handle(detail::unaccepted_probe<accepted_of<Derived>>{}); },
                  "troupe: a delivery handler's message is missing from accepts");
    const auto& r = options_.redelivery;
    const auto& d = options_.dedup;
    if (r.initial_backoff.count() <= 0 || r.max_backoff < r.initial_backoff)
      refuse("redelivery backoff must be positive, and max_backoff >= initial_backoff");
    if (!(r.jitter >= 0 && r.jitter < 1)) refuse("redelivery jitter must be in [0, 1)");
    if (r.burst == 0 || r.max_unconfirmed == 0) refuse("redelivery burst and max_unconfirmed must be at least 1");
    if (d.cached_marks == 0) refuse("dedup cached_marks must be at least 1");
    std::optional<std::chrono::milliseconds> retention;
    if constexpr (receives()) {
      retention = d.retention;
      ctx.system().template extension_or<detail::dedup_expiry>(
          [&] { return detail::dedup_expiry::install(this->storage(), tables_, net_); });
    }
    net_->admit(this->pid(), r.horizon(), retention);
    // The transport forgets the admission once the actor has stopped (not
    // while it restarts): keyed by the transport, a restart's instance
    // replaces the first one's.
    if (auto* cell = troupe::detail::constructing_cell) {
      auto forget = [net = net_, pid = this->pid()](const down&) { net->forget(pid); };
      const auto* key = reinterpret_cast<const troupe::detail::cell_base*>(net_.get());
      if (cell->add_watcher(std::move(forget), key)) net_->forget(this->pid());
      forget_when_stopped_ = true;
    }
  }

  /// The options of this instance: those `delivery::entities<Derived>` was
  /// given, for one of its entities; else `given`, or the defaults.
  static delivery_options settle(actor_system& sys, const std::string& pid,
                                 const std::optional<delivery_options>& given) {
    auto kept = sys.template extension<detail::entity_policy<Derived>>();
    if (!kept || !pid.starts_with(kept->prefix)) return given.value_or(delivery_options{});
    if (given && !(*given == kept->options))
      throw error(troupe::errc::invalid_argument,
                  "reliable actor " + pid + ": constructed with other delivery options than delivery::entities<" +
                      std::string(troupe::detail::type_name<Derived>()) +
                      "> was given (every activation has those: leave them out of the constructor)");
    return kept->options;
  }

public:
  reliable_actor(const reliable_actor&) = delete;
  reliable_actor& operator=(const reliable_actor&) = delete;

  ~reliable_actor() {
    if (tracker_) tracker_->close();
    // The transport keeps the live actors' policies (and entity types'),
    // not every name ever admitted.
    if (!forget_when_stopped_) net_->forget(this->pid());
  }

  /// Recovery, then the deliveries left unconfirmed are sent again and the
  /// receiver's dedup marks loaded, then `Derived::on_recovery_completed()`.
  task<> on_start() {
    co_await this->recover_state();
    std::unordered_map<std::string, std::string> dead;
    auto pending = co_await this->storage().async_run([this, &dead] { return load(dead); });
    auto& ctx = this->actor_context();
    tracker_ = std::make_shared<detail::outgoing_tracker>(this->pid(), this->storage_ptr(), tables_, net_,
                                                                   ctx.self(), options_.redelivery, ctx.get_executor());
    tracker_->start(std::move(pending), std::move(dead));
    co_await this->recovery_completed();
  }

  // -- messages of the layer (a `handle` in Derived does not hide these) --

  /// As an entity: resumed after a restart because the work index marks
  /// it. Its recovery sent what was unconfirmed; a mark of the delivery
  /// layer with nothing unconfirmed behind it (its clearing was lost in a
  /// crash) goes.
  void troupe_handle(persistence::resumed) { tracker_->clear_mark_if_idle(); }

  /// As an entity, it passivates only with nothing unconfirmed (its
  /// redeliveries need it live).
  bool troupe_can_passivate() const { return !tracker_ || tracker_->idle(); }

  task<> troupe_handle(detail::inbound in) {
    auto& m = in.msg;
    tracker_->dequeued(m);
    auto key = detail::mark_key(m.from, m.id.str());
    const auto* mark = co_await find_mark(m, key);
    if (mark && mark->answers()) {
      ++duplicates_;
      if (mark->what == detail::dedup_marks::mark::state::rejected)
        net_->send(acknowledgement{m.from, this->pid(), m.id, std::nullopt, mark->reason});
      else
        net_->send(acknowledgement{m.from, this->pid(), m.id, mark->reply});
      co_return;
    }
    // No mark at all (a failing one proves it was never processed): a copy
    // whose mark may have been dropped is not processed, whatever the
    // clocks did since.
    if (!mark && may_have_forgotten(m)) {
      ++expired_;
      net_->send(acknowledgement{m.from, this->pid(), m.id, std::nullopt, expired_reason(m), true});
      co_return;
    }
    check_sender(m.from);
    using receive_fn = task<> (reliable_actor::*)(message&, std::string&);
    receive_fn f = nullptr;
    select(accepted_of<Derived>{}, m, f);
    if (!f) {
      ++rejected_;
      net_->unaccepted(troupe::detail::type_name<Derived>(), this->pid(), m, describe(accepted_of<Derived>{}),
                       version_known(accepted_of<Derived>{}, m)
                           ? m.manifest + " is accepted at another version; this delivery has version " +
                                 std::to_string(m.version)
                           : m.manifest + " is not in its accepts");
      co_return;
    }
    co_await (this->*f)(m, key);
  }

  /// A command from outside (see `command`): `handle(delivery<M>)` once
  /// per client and request ID, its reply kept with the dedup mark in the
  /// handler's atomic write; a retry is answered from the mark. A handler
  /// failure fails the ask (`troupe::errc::handler_failed`, counted as for
  /// a delivery; at `max_handler_failures`, `errc::rejected` for every
  /// retry), not the actor.
  template <class M>
    requires detail::listed<M, accepted_of<Derived>>
  task<reply_type_t<Derived, delivery<M>>> troupe_handle(command<M> c) {
    return run_command<M>(std::move(c));
  }

  task<std::vector<dead_letter>> troupe_handle(list_dead_letters);

  task<bool> troupe_handle(requeue r);

  delivery_stats troupe_handle(delivery_status) const {
    auto s = tracker_ ? tracker_->stats() : delivery_stats{};
    s.processed = processed_;
    s.duplicates = duplicates_;
    s.rejected = rejected_;
    s.handler_failures = handler_failures_;
    s.poison_rejected = poison_rejected_;
    s.expired = expired_;
    return s;
  }

protected:
  // -- sending ----------------------------------------------------------------

  /// Records the delivery of `msg` to the reliable actor named `to` under
  /// `id`, atomically with `cause` (the events that cause it; none is
  /// allowed), and sends it once durable. In a batch (a delivery handler is
  /// one) it joins the batch and is sent after its write. Throws as
  /// `persist` does, and `errc::backlog_full` when the sender already has
  /// `max_unconfirmed` deliveries outstanding (unless `wait_when_full`: then
  /// it waits for room). A second delivery under an ID still unconfirmed to
  /// the same receiver is the same delivery (sent once, as first recorded;
  /// only its cause is written); to another receiver it is refused with
  /// `errc::id_in_use`, nothing written (an ID names one delivery of its
  /// sender).
  template <message_type M, persistence::event... E>
  task<> deliver(std::string to, delivery_id id, M msg, E... cause) {
    if (to.empty())
      throw error(troupe::errc::invalid_argument, "deliver from " + this->pid() + ": the receiver name is empty");
    detail::outgoing o;
    o.to = std::move(to);
    o.id = id.str();
    o.manifest = std::string(M::manifest);
    o.version = persistence::version_of<M>();
    try {
      o.payload = persistence::to_json_text(msg);
    } catch (const std::exception& ex) {
      throw error(troupe::errc::invalid_argument,
                  "cannot serialize " + o.manifest + " for delivery " + o.id + ": " + ex.what());
    }
    if (o.payload.size() > options_.max_message_bytes)
      throw error(errc::message_too_large, "delivery " + o.id + " of " + o.manifest + " from " + this->pid() + " has " +
                                               std::to_string(o.payload.size()) + " bytes; the limit is " +
                                               std::to_string(options_.max_message_bytes) +
                                               " (delivery_options::max_message_bytes)");
    o.created_ms = o.first_ms = troupe::detail::now_ms();
    using held = typename detail::outgoing_tracker::reservation::outcome;
    bool first = false;
    for (;;) {
      auto r = tracker_->reserve(o);
      first = r.first;
      if (r.what == held::reserved) break;
      if (r.what == held::same) {
        // The same delivery, unconfirmed: it stays as first recorded (sent
        // once); only its cause is written.
        if constexpr (sizeof...(E) > 0) co_await this->persist_all_with({}, std::move(cause)...);
        co_return;
      }
      if (r.what == held::dead_elsewhere)
        throw error(errc::id_in_use, "deliver " + o.id + " from " + this->pid() + " to " + o.to +
                                         ": a dead letter under that ID is to " + r.other +
                                         " (re-queue it, or deliver under another ID)");
      if (r.what == held::held_elsewhere)
        throw error(errc::id_in_use, "deliver " + o.id + " from " + this->pid() + " to " + o.to +
                                         ": a delivery under that ID is unconfirmed to " + r.other +
                                         " (an ID names one delivery of its sender)");
      co_await room_freed(); // full: then the ID is checked again
    }
    std::vector<persistence::table_write> tables;
    tables.push_back(
        persistence::table_write::put(tables_.deliveries, tracker_->pending_key(o.id), detail::encode_outgoing(o)));
    // The sender has work from this write on: once per batch (its
    // deliveries share one write); outside a batch, every delivery that
    // finds no mark of this instance durable carries it.
    const bool carry = first && !(this->in_batch() && batch_marked_);
    if (carry) tables.push_back(tracker_->work_mark());
    try {
      co_await this->persist_all_with(std::move(tables), std::move(cause)...);
    } catch (...) {
      tracker_->unclaim(o.id);
      throw;
    }
    if (carry && this->in_batch()) batch_marked_ = true;
    // Sent once durable: now, or after the batch's write (the actor
    // outlives its batch); given up (with its claim) if that write fails.
    // (`first`, not `carry`: a delivery of a batch rides in the write that
    // carries the mark.)
    this->after_batch([this, o = std::move(o), first](bool durable) mutable {
      batch_marked_ = false; // the batch ended, written or not
      if (durable)
        tracker_->add_reserved(std::move(o), first);
      else
        tracker_->unclaim(o.id);
    });
  }

  const delivery_options& delivery_settings() const noexcept { return options_; }

  /// On the journal's thread (`storage().async_run`): whether the delivery
  /// `id` of the reliable actor `sender` (this one or another on the same
  /// store) is recorded as unconfirmed in the store.
  bool recorded_unconfirmed(const std::string& sender, const delivery_id& id) {
    std::optional<std::string> v;
    if (auto ec = this->storage().get(tables_.deliveries, detail::key(detail::key_prefix(sender), 'p', id.str()), v))
      throw error(ec, "reading the delivery " + id.str() + " of " + sender);
    return v.has_value();
  }

  /// Whether a delivery this actor made under `id` is recorded and not yet
  /// confirmed (nor rejected, nor given up).
  bool unconfirmed(const delivery_id& id) const { return tracker_ && tracker_->unconfirmed(id.str()); }

private:

  static constexpr bool receives_of(accepts<>) { return false; }
  template <class... M>
  static constexpr bool receives_of(accepts<M...>) {
    return true;
  }
  static constexpr bool receives() { return receives_of(accepted_of<Derived>{}); }

  /// A re-queued delivery is sent for another horizon; its receiver may
  /// have processed it as early as it was first recorded, and keeps the
  /// mark for its retention from then (at the earliest: its mark counts
  /// from the later of that record and its processing): the re-queue is
  /// refused unless the
  /// mark outlives the new horizon (or the operator forces it, accepting
  /// that it may be processed again).
  /// Returns whether the re-queue is in time (else it was forced).
  bool refuse_late_requeue(const detail::outgoing& o, bool force) const {
    const auto retention = net_->retention_of(o.to);
    const auto horizon = options_.redelivery.horizon();
    if (retention && *retention == std::chrono::milliseconds::max()) return true;
    const auto age =
        std::chrono::milliseconds(std::max<std::int64_t>(0, troupe::detail::now_ms() - o.first_recorded_ms()));
    if (retention && horizon != std::chrono::milliseconds::max() && age + horizon <= *retention) return true;
    if (force) return false;
    const auto show = [](std::chrono::milliseconds d) {
      return d == std::chrono::milliseconds::max() ? std::string("unlimited") : std::to_string(d.count()) + " ms";
    };
    throw error(errc::requeue_refused,
                "re-queue of " + o.id + " from " + this->pid() + " to " + o.to + " refused: it was first recorded " +
                    std::to_string(age.count()) + " ms ago and would be sent for another " + show(horizon) + ", but " +
                    (retention ? o.to + " keeps its dedup marks for " + show(*retention)
                               : o.to + "'s dedup retention is not known to this transport") +
                    ": it may have forgotten the delivery and would process it again (requeue{id, .force = true} "
                    "accepts that)");
  }

  /// Whether the store may have dropped a mark of `m`: the mark counts its
  /// retention from `m.recorded_ms` at the earliest, and the store has
  /// dropped only marks whose time plus the retention is at or before its
  /// expiry floor (which never goes back). No wall clock enters this: a
  /// clock that steps only changes how soon marks go.
  bool may_have_forgotten(const message& m) {
    if (m.recorded_ms == 0 || std::string_view(m.manifest).starts_with("troupe.")) return false;
    const auto r = net_->retention_of(this->pid()); // the expiry's own source
    if (!r || *r == std::chrono::milliseconds::max()) return false;
    const auto floor = this->storage().expired_through();
    if (floor == std::numeric_limits<std::int64_t>::min()) return false;
    return m.recorded_ms <= floor - r->count();
  }

  std::string expired_reason(const message& m) {
    return "delivery " + m.id.str() + " from " + m.from + " reached " + this->pid() +
           " after it may have forgotten it (first recorded at " + std::to_string(m.recorded_ms) +
           " ms; marks are kept for the retention from then, and the store has dropped expired marks up to " +
           std::to_string(this->storage().expired_through()) +
           " ms): not processed, so that it is never processed twice (requeue{id, .force = true} accepts a second "
           "processing)";
  }

  /// The time a mark of `m` counts its retention from: the later of the
  /// delivery's first record (the sender's clock: its horizon counts from
  /// there) and now, so that the mark outlives every copy its sender may
  /// send, whatever either clock did between.
  static std::int64_t mark_time(const message& m) { return std::max(m.recorded_ms, troupe::detail::now_ms()); }

  /// Warns (through the transport) about a sender it has not admitted.
  /// The last few admitted senders are remembered here by hash, so a
  /// receiver fed by them does not take the transport's lock per delivery
  /// (a collision with an admitted sender's hash would only skip a
  /// warning).
  void check_sender(const std::string& from) {
    const auto h = std::hash<std::string>{}(from);
    for (std::size_t i = 0; i < known_count_; ++i)
      if (known_senders_[i] == h) return;
    if (!net_->unknown_sender(from, this->pid())) return;
    if (known_count_ < known_senders_.size())
      known_senders_[known_count_++] = h;
    else
      known_senders_[next_known_++ % known_senders_.size()] = h;
  }

  [[noreturn]] void refuse(const char* why) const {
    throw error(troupe::errc::invalid_argument, "reliable actor " + this->pid() + ": " + why);
  }

  static std::shared_ptr<transport> transport_of(actor_system& sys) {
    auto t = sys.extension<transport>();
    if (!t)
      throw error(troupe::errc::invalid_argument,
                  "the actor system has no delivery transport: call troupe::delivery::set_transport(system) before "
                  "spawning " +
                      std::string(troupe::detail::type_name<Derived>()));
    return t;
  }

  /// The key in `dedup` of the mark `mark_key` (a `detail::mark_key`).
  std::string dedup_key(std::string_view mark_key) const { return detail::key(tracker_->prefix(), 0, mark_key); }

  /// The mark of `m` (its sender and ID; `key` is their `mark_key`), from
  /// the marks in memory or else from the store — where a store has marks
  /// of the first layout, one moved from there for its ID (which stands for
  /// any sender) — or null. A mark read from the store stays in memory
  /// (`cached_marks`). The pointer is valid until the next mark is added.
  task<const detail::dedup_marks::mark*> find_mark(const message& m, const std::string& key,
                                                    bool first_layout = true) {
    if (const auto* mk = marks_.find(key)) {
      // One past the retention is as the store may have it: forgotten.
      const auto r = options_.dedup.retention;
      if (r == std::chrono::milliseconds::max() || mk->time_ms + r.count() > troupe::detail::now_ms()) co_return mk;
      marks_.erase(key);
    }
    const bool moved = first_layout && tables_.dedup_by_id.has_value();
    auto k = dedup_key(key);
    // Mostly the store answers from memory (a new delivery's mark is not
    // there, as its filters say), without a trip to the blocking thread.
    std::optional<std::string> value;
    if (moved || !this->storage().try_get(tables_.dedup, k, value)) {
      // (A named callable: GCC 12 destroys a temporary one inside the
      // co_await twice.)
      auto read = [this, k = std::move(k), k2 = moved ? dedup_key(detail::mark_key({}, m.id.str())) : std::string()] {
        std::optional<std::string> v;
        if (auto ec = this->storage().get(tables_.dedup, k, v))
          throw error(ec, "reading a dedup mark of " + this->pid());
        if (!v && !k2.empty())
          if (auto ec = this->storage().get(tables_.dedup, k2, v))
            throw error(ec, "reading a dedup mark of " + this->pid());
        return v;
      };
      value = co_await this->storage().async_run(std::move(read));
    }
    if (!value) co_return nullptr;
    marks_.add(key, detail::decode_mark(*value));
    co_return marks_.find(key);
  }

  /// On the journal's thread: the pending deliveries and the dead letters'
  /// IDs (and a receiver's marks of the first layout moved).
  std::vector<detail::outgoing> load(std::unordered_map<std::string, std::string>& dead);

  /// On the journal's thread: this receiver's marks of the first layout
  /// (by ID only) move to `dedup` under an empty sender, in one atomic
  /// write (all of them or none; a crash before it leaves them where they
  /// were, for the next start).
  void move_marks_by_id(const std::string& prefix);

  /// The accepted types, as "manifest vN, ...".
  template <class... M>
  static std::string describe(accepts<M...>) {
    std::string s;
    ((s += (s.empty() ? "" : ", ") + std::string(M::manifest) + " v" + std::to_string(persistence::version_of<M>())),
     ...);
    return s.empty() ? "nothing" : s;
  }
  /// Whether `m`'s manifest is accepted at some version.
  template <class... M>
  static bool version_known(accepts<M...>, const message& m) {
    return ((m.manifest == M::manifest) || ...);
  }

  template <class... M>
  void select(accepts<M...>, const message& m, task<> (reliable_actor::*& f)(message&, std::string&)) {
    (void)((m.manifest == M::manifest && m.version == persistence::version_of<M>()
                ? (f = &reliable_actor::receive_as<M>, true)
                : false) ||
           ...);
  }

  /// The first arrival of a delivery of an `M`: the handler, its events, the
  /// dedup mark and its deliveries in one batch; the acknowledgement once
  /// that is durable.
  template <class M>
  task<> receive_as(message& m, std::string& key);

  /// The command `c` (see `troupe_handle(command<M>)`).
  template <class M>
  task<reply_type_t<Derived, delivery<M>>> run_command(command<M> c);

  /// What the first run of a delivery or command left: its reply, or the
  /// failure mark written (`failed`, with no mark when even that write
  /// failed: `unmarked`).
  struct first_run {
    std::optional<std::string> reply;
    std::optional<detail::dedup_marks::mark> failed;
    bool unmarked = false;
  };

  /// Runs the handler on the first arrival of `m` (whose `msg` is decoded):
  /// its events, deliveries and the mark in one write, durable when this
  /// returns.
  template <class M>
  task<first_run> run_first(const message& m, std::string& key, M msg, bool acknowledge_rejection);

  /// The handler failed on `m` (its batch aborted): the failure is counted
  /// durably under the delivery's mark key; at `max_handler_failures` the
  /// delivery is rejected (durably, and the sender told) — never one of the
  /// library's own (`troupe.*`). The instance goes on serving others; if the
  /// failed batch left unwritten events in its state, the state is
  /// recovered from the store first (in place: no restart).
  task<std::optional<detail::dedup_marks::mark>> handler_failed(const message& m, const std::string& key,
                                                                std::exception_ptr failure,
                                                                bool acknowledge_rejection = true);

  /// Reserves room for `n` deliveries once the tracker has it (the caller
  /// tried `try_reserve` first, so the common case costs no coroutine).
  task<> wait_for_room(std::size_t n) {
    do co_await room_freed();
    while (!tracker_->try_reserve(n));
  }

  /// Waits until the tracker may have room (throws `backlog_full` unless
  /// the policy says to wait).
  task<> room_freed() {
    if (!options_.redelivery.wait_when_full)
      throw error(errc::backlog_full, this->pid() + " has " + std::to_string(options_.redelivery.max_unconfirmed) +
                                          " unconfirmed deliveries (redelivery_policy::max_unconfirmed)");
    auto [ec] = co_await tracker_->wait_for_room(asio::experimental::as_tuple(asio::use_awaitable));
    if (ec) throw error(troupe::errc::actor_stopped, this->pid() + " stopped while waiting to deliver");
  }

  delivery_options options_;
  std::shared_ptr<transport> net_;
  detail::tables tables_;
  std::shared_ptr<detail::outgoing_tracker> tracker_;
  detail::dedup_marks marks_;
  bool forget_when_stopped_ = false; // the transport forgets the admission at the actor's stop
  bool batch_marked_ = false;        // the open batch's write carries the work mark
  std::array<std::size_t, 4> known_senders_{}; // hashes of admitted senders (`check_sender`)
  std::uint8_t known_count_ = 0, next_known_ = 0;
  std::uint64_t processed_ = 0, duplicates_ = 0, rejected_ = 0, handler_failures_ = 0, poison_rejected_ = 0,
                expired_ = 0;
};

} // namespace troupe::delivery

#include <troupe/delivery/impl/reliable_actor.hpp>
