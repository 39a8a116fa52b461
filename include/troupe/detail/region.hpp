#pragma once

// The machinery of entities (see troupe/entity.hpp): a region keeps the
// live activations of one actor type by key, activates one on its first
// message, buffers what arrives while it passivates, and hands all of it
// to the next activation.

#include <troupe/config.hpp>
#include <troupe/context.hpp>
#include <troupe/error.hpp>
#include <troupe/lifecycle.hpp>
#include <troupe/detail/cell.hpp>
#include <troupe/detail/envelope.hpp>
#include <troupe/detail/spawn.hpp>
#include <troupe/detail/system_state.hpp>
#include <troupe/detail/unique_function.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace troupe {

/// Names one entity of a region: its key. An entity type constructed from
/// `(context<T>, entity_id, args...)` receives it; a type that declares
/// `using entity_key = K;` receives a `K{key}` instead (a persistent actor
/// its `persistence_id`).
struct entity_id {
  std::string value;
};

/// How a region runs its entities (`actor_system::entities`).
struct entity_options {
  /// An entity that has handled nothing for this long is passivated (it
  /// finishes what it handles, runs `on_stop` and leaves memory); zero:
  /// never for idleness. Checked every quarter of it.
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(2)};
  /// At most this many live entities (0: no limit); the least recently
  /// used are passivated when an activation goes past it. An entity that
  /// declines (see `entity_ref`) is kept, so the limit can be exceeded by
  /// the entities that decline.
  std::size_t max_live = 0;
  /// What happens when an entity's handler throws (per activation; a
  /// stopped entity is activated again by its next message).
  troupe::supervision supervision{};
};

/// What a region has done (for monitoring and tests).
struct entity_stats {
  std::size_t live = 0;            ///< activations alive now (some may be passivating)
  std::uint64_t activations = 0;   ///< activations started
  std::uint64_t passivations = 0;  ///< activations that passivated
  std::uint64_t asked = 0;         ///< passivations asked for (idle, or past the limit)
  std::uint64_t declined = 0;      ///< passivations an entity declined
  std::uint64_t waited = 0;        ///< messages that waited for an activation (none was live, or it passivated)
};

} // namespace troupe

namespace troupe::detail {

template <class T>
class region;

/// What an entity of type `T` is constructed from: `T::entity_key` if it
/// declares one, else `troupe::entity_id`.
template <class T>
struct entity_key {
  using type = entity_id;
};
template <class T>
  requires requires { typename T::entity_key; }
struct entity_key<T> {
  using type = typename T::entity_key;
};

/// Asks an entity to passivate; handled in its turn, in order with its
/// other messages.
template <class T>
struct passivate_envelope final : envelope<T> {
  bool process(cell<T>& c) override {
    c.passivation_requested();
    return false;
  }
  bool counts() const noexcept override { return false; }
};

/// Whether an entity of type `T` allows its passivation now (the library
/// hook first, then the user's).
template <class T>
bool allows_passivation(T& t) {
  if constexpr (requires {
                  { t.troupe_can_passivate() } -> std::convertible_to<bool>;
                })
    if (!t.troupe_can_passivate()) return false;
  if constexpr (requires {
                  { t.can_passivate() } -> std::convertible_to<bool>;
                })
    if (!t.can_passivate()) return false;
  return true;
}

/// One key of a region with a live (or starting) activation, or messages
/// waiting for one. Guarded by the region's mutex.
template <class T>
struct region_entry {
  enum class phase : std::uint8_t {
    activating,  ///< its cell is being spawned: messages wait in `waiting`
    active,      ///< messages go to `live`
    passivating, ///< `live` is stopping: messages wait for the next activation
  };

  explicit region_entry(std::string k) : key(std::move(k)) {}

  std::string key;
  cell_ptr<cell<T>> live;
  phase ph = phase::activating;
  bool spawning = false; // its next activation is being spawned
  bool asked = false;   // a passivation request is queued in `live`
  bool touched = false; // a message arrived since it was asked
  /// `live`'s count of handled messages when it was asked: one handled
  /// since (a long handler, or its own timers) means it was not idle.
  std::uint32_t handled_when_asked = 0;
  std::uint64_t used = 0; // the region's tick of its last message
  // Messages waiting for the next activation, oldest first.
  envelope_base* first = nullptr;
  envelope_base* last = nullptr;
  // Least recently used order (active entries not asked to passivate).
  region_entry* older = nullptr;
  region_entry* newer = nullptr;
  bool listed = false;

  void wait(envelope_base* e, entity_stats& s) noexcept {
    ++s.waited;
    e->next = nullptr;
    if (last)
      last->next = e;
    else
      first = e;
    last = e;
  }
  envelope_base* take_waiting() noexcept {
    last = nullptr;
    return std::exchange(first, nullptr);
  }
};

/// The cell of one activation of an entity: it knows its region and entry.
template <class T, class... Args>
class entity_cell final : public cell_impl<T, Args...> {
public:
  template <class... A>
  entity_cell(system_state& s, const spawn_options& o, std::shared_ptr<region<T>> r, region_entry<T>* e, A&&... a)
      : cell_impl<T, Args...>(s, o, std::forward<A>(a)...), region_(std::move(r)), entry_(e) {}

  void passivation_requested() noexcept override { region_->passivation_requested(*this, *entry_); }
  void awaited_all_ended() noexcept override { region_->awaited_all_ended(); }
  envelope_base* hand_over(envelope_base* list) noexcept override { return region_->hand_over(*entry_, list); }

private:
  std::shared_ptr<region<T>> region_;
  region_entry<T>* entry_;
};

/// Told to a region's sweeper every quarter of the idle timeout.
struct region_tick {};

/// Ticks its region (an actor, so that its timer lives and ends with the
/// system's pool).
template <class T>
class region_sweeper {
public:
  region_sweeper(context<region_sweeper> ctx, std::weak_ptr<region<T>> r, std::chrono::nanoseconds period)
      : region_(std::move(r)) {
    ctx.schedule_every(period, region_tick{});
  }
  void handle(region_tick) {
    if (auto r = region_.lock()) r->tick();
  }

private:
  std::weak_ptr<region<T>> region_;
};

/// The entities of type `T` in one actor system. Thread-safe.
template <class T>
class region : public std::enable_shared_from_this<region<T>> {
public:
  using entry = region_entry<T>;
  /// Spawns the cell of `e`'s next activation (an `entity_cell`).
  using factory = unique_function<cell_ptr<cell<T>>(region&, entry&)>;

  /// The idle timeout counts in ticks of a quarter of it.
  static constexpr std::uint64_t idle_ticks = 4;

  region(system_state& s, entity_options o) : sys_(&s), options_(std::move(o)) { s.add_ref(); }
  ~region() {
    for (auto& [key, e] : entries_) reject_all(e->take_waiting(), errc::system_shutdown, "the actor system shut down");
    sys_->release();
  }
  region(const region&) = delete;
  region& operator=(const region&) = delete;

  void set_factory(factory f) { make_ = std::move(f); }
  const entity_options& options() const noexcept { return options_; }
  system_state& sys() const noexcept { return *sys_; }

  /// Starts the sweeper, which passivates idle entities (`owner` spawns).
  template <class Spawn>
  void start_sweeper(Spawn&& spawn) {
    if (options_.idle_timeout.count() <= 0) return;
    const auto period = std::max<std::chrono::nanoseconds>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(options_.idle_timeout) / idle_ticks,
        std::chrono::milliseconds(1));
    std::forward<Spawn>(spawn)(std::weak_ptr<region>(this->shared_from_this()), period);
  }

  // -- messaging (any thread) ---------------------------------------------------

  /// Hands a tell's envelope to the entity `key`, activating it if it has
  /// no live activation. Never throws; the error when it could not be
  /// queued (the envelope is gone then).
  std::error_code deliver(std::string_view key, envelope<T>* e) noexcept {
    entry* to_start = nullptr;
    std::error_code ec;
    {
      std::unique_lock l(mutex_);
      auto* en = find_or_add(key, e, ec);
      if (!en) return ec;
      touch(*en);
      // Under the lock: in order with a passivation. An activation that
      // stopped on its own (its `stopped` is on the way) starts again.
      if (en->ph == entry::phase::active && !en->live->closed()) return en->live->enqueue(e);
      en->wait(e, stats_);
      to_start = needs_start(*en);
    }
    if (to_start) activate(*to_start);
    return {};
  }

  /// As `deliver`, for an ask (`cell::enqueue_ask`'s protocol: the envelope
  /// is completed with the error if it cannot be queued).
  template <class E>
  void deliver_ask(std::string_view key, E* e) noexcept {
    e->add_ref(); // keeps `initiating` readable after a concurrent reply
    entry* to_start = nullptr;
    {
      std::unique_lock l(mutex_);
      std::error_code ec;
      auto* en = find_or_add(key, e, ec);
      if (en) {
        touch(*en);
        if (en->ph == entry::phase::active && !en->live->closed()) {
          en->live->enqueue_ask(e);
          e->dispose(); // the reference taken above (enqueue_ask took its own)
          return;
        }
        en->wait(e, stats_); // the list holds the envelope (a reply may complete it once the lock is gone)
        to_start = needs_start(*en);
      }
    }
    if (to_start) activate(*to_start);
    e->initiating.store(false, std::memory_order_release);
    e->dispose();
  }

  // -- lifecycle -------------------------------------------------------------------

  /// A quarter of the idle timeout passed: entities idle for the whole of
  /// it are asked to passivate.
  void tick() {
    std::vector<cell_ptr<cell<T>>> ask;
    {
      std::lock_guard g(mutex_);
      ++tick_;
      while (lru_oldest_ && tick_ - lru_oldest_->used >= idle_ticks) {
        auto& e = *lru_oldest_;
        // Busy with messages that did not come through the region (its own
        // timers, deliveries through its endpoint): not idle.
        if (e.live->take_busy())
          touch(e);
        else
          ask.push_back(ask_to_passivate(e));
      }
    }
    for (auto& c : ask) c->enqueue_system(new passivate_envelope<T>);
  }

  /// In `c`'s turn: it was asked to passivate. It does, unless it declines
  /// (or awaits a reentrant handler or a reply), or a message arrived for
  /// it or it handled one since it was asked.
  void passivation_requested(cell<T>& c, entry& e) noexcept {
    bool allowed = false;
    try {
      allowed = c.awaited_under_way() == 0 && allows_passivation(c.instance());
    } catch (...) {
    }
    std::vector<cell_ptr<cell<T>>> ask;
    bool stop = false;
    {
      std::lock_guard g(mutex_);
      if (e.live.get() != &c || !e.asked) return;
      e.asked = false;
      --leaving_;
      if (!allowed) {
        // Declined: asked again when it is the least recently used again
        // (at the next activation past the limit, or idle again).
        ++stats_.declined;
        list_newest(e);
        return;
      }
      if (e.touched || c.handled() != e.handled_when_asked) {
        // Used since it was asked (a message through the region, or one it
        // handled meanwhile: a handler that outlasted the idle timeout, a
        // thread preempted in its turn): it stays, no longer the least
        // recently used; past the limit, the one that now is goes instead.
        e.used = tick_;
        list_newest(e);
        over_limit(ask, &e);
      } else {
        e.ph = entry::phase::passivating;
        ++leaving_;
        stop = true;
      }
    }
    if (stop) c.request_stop(exit_reason::passivated);
    for (auto& a : ask) a->enqueue_system(new passivate_envelope<T>);
  }

  /// In an entity's turn: the last of what it awaited (reentrant handlers,
  /// replies to asks) ended. It may have declined a passivation past
  /// `max_live` meanwhile: the region is brought back within it, as at an
  /// activation.
  void awaited_all_ended() noexcept {
    std::vector<cell_ptr<cell<T>>> ask;
    try {
      std::lock_guard g(mutex_);
      over_limit(ask, nullptr);
    } catch (...) {
      // No memory for the list: asked again at the next activation.
    }
    for (auto& a : ask) a->enqueue_system(new passivate_envelope<T>);
  }

  /// In `e`'s stopping cell, once it passivated: what was queued in it
  /// waits for the next activation, before what arrived since (`list`,
  /// oldest first). Returns what it does not take (internal messages).
  envelope_base* hand_over(entry& e, envelope_base* list) noexcept {
    envelope_base* kept_first = nullptr;
    envelope_base* kept_last = nullptr;
    envelope_base* dropped = nullptr;
    envelope_base* dropped_last = nullptr;
    while (list) {
      auto* x = list;
      list = list->next;
      x->next = nullptr;
      if (auto* y = static_cast<envelope<T>*>(x); y->counts() || y->stashed()) {
        (kept_last ? kept_last->next : kept_first) = x;
        kept_last = x;
      } else {
        (dropped_last ? dropped_last->next : dropped) = x;
        dropped_last = x;
      }
    }
    if (kept_first) {
      std::lock_guard g(mutex_);
      for (auto* x = kept_first; x; x = x->next) ++stats_.waited;
      kept_last->next = e.first;
      if (!e.first) e.last = kept_last;
      e.first = kept_first;
    }
    return dropped;
  }

  /// `c`, an activation of `e`, has stopped (for whatever reason): the next
  /// activation starts if messages wait for it; otherwise `e` is forgotten.
  void stopped(entry& e, const cell<T>* c, exit_reason why) noexcept {
    {
      std::lock_guard g(mutex_);
      if (e.live.get() != c) return;
      if (why == exit_reason::passivated) ++stats_.passivations;
      if (e.asked || e.ph == entry::phase::passivating) --leaving_;
      e.asked = false;
      e.live = {};
      unlist(e);
      if (!e.first) {
        entries_.erase(e.key); // destroys e
        return;
      }
      e.ph = entry::phase::activating;
      e.spawning = true;
    }
    activate(e);
  }

  entity_stats stats() const {
    std::lock_guard g(mutex_);
    auto s = stats_;
    s.live = entries_.size();
    return s;
  }

private:
  /// With the mutex held: the entry of `key`, made if there is none; null
  /// (and the envelope rejected, `ec` set) when the system is shutting down.
  entry* find_or_add(std::string_view key, envelope<T>* e, std::error_code& ec) noexcept {
    if (auto it = entries_.find(key); it != entries_.end()) return it->second.get();
    if (sys_->shutting_down.load(std::memory_order_acquire)) {
      ec = errc::system_shutdown;
      reject_all(e, errc::system_shutdown, "the actor system is shutting down");
      return nullptr;
    }
    try {
      auto made = std::make_unique<entry>(std::string(key));
      auto* p = made.get();
      entries_.emplace(std::string_view(p->key), std::move(made));
      p->used = tick_;
      return p;
    } catch (...) {
      ec = errc::invalid_argument;
      reject_all(e, errc::invalid_argument, "out of memory activating an entity");
      return nullptr;
    }
  }

  /// With the mutex held: `e` if it waits for an activation that nobody
  /// has begun (the caller begins it, outside the lock).
  entry* needs_start(entry& e) noexcept {
    if (e.ph != entry::phase::activating || e.spawning) return nullptr;
    e.spawning = true;
    return &e;
  }

  /// Spawns `e`'s next activation and gives it what waits; past
  /// `max_live`, the least recently used are asked to passivate. On
  /// failure what waits fails with the reason and `e` is forgotten.
  void activate(entry& e) noexcept {
    cell_ptr<cell<T>> c;
    try {
      c = make_(*this, e);
    } catch (...) {
      auto failure = std::current_exception();
      envelope_base* waiting;
      {
        std::lock_guard g(mutex_);
        waiting = e.take_waiting();
        entries_.erase(e.key);
      }
      reject_all(waiting, failure);
      return;
    }
    const cell<T>* raw = c.get();
    std::vector<cell_ptr<cell<T>>> ask;
    {
      std::lock_guard g(mutex_);
      e.live = c;
      e.ph = entry::phase::active;
      e.spawning = false;
      e.used = tick_;
      ++stats_.activations;
      list_newest(e);
      for (auto* w = e.take_waiting(); w;) {
        auto* next = w->next;
        e.live->enqueue_system(static_cast<envelope<T>*>(w));
        w = next;
      }
      over_limit(ask, &e);
    }
    for (auto& a : ask) a->enqueue_system(new passivate_envelope<T>);
    // Its stop, whatever the reason, ends this activation (one that
    // stopped already is ended here).
    try {
      if (auto d = c->add_watcher([self = this->shared_from_this(), &e, raw](const down& d) {
            self->stopped(e, raw, d.reason);
          }))
        stopped(e, raw, d->reason);
    } catch (...) {
      // No memory for the watch: the activation is stopped, and ended here.
      c->request_stop(exit_reason::failure);
      stopped(e, raw, exit_reason::failure);
    }
  }

  /// With the mutex held: past `max_live`, the least recently used (other
  /// than `keep`) are asked to passivate (into `ask`).
  void over_limit(std::vector<cell_ptr<cell<T>>>& ask, const entry* keep) {
    if (!options_.max_live) return;
    while (entries_.size() - leaving_ > options_.max_live && lru_oldest_ && lru_oldest_ != keep)
      ask.push_back(ask_to_passivate(*lru_oldest_));
  }

  /// With the mutex held: `e` is asked to passivate (the caller queues the
  /// request in the returned cell, outside the lock).
  cell_ptr<cell<T>> ask_to_passivate(entry& e) {
    ++stats_.asked;
    unlist(e);
    e.asked = true;
    e.touched = false;
    e.handled_when_asked = e.live->handled();
    ++leaving_;
    return e.live;
  }

  /// With the mutex held: a message for `e`.
  void touch(entry& e) noexcept {
    e.used = tick_;
    if (e.asked) e.touched = true;
    if (e.listed && lru_newest_ != &e) {
      unlist(e);
      list_newest(e);
    }
  }

  void list_newest(entry& e) noexcept {
    if (e.listed) return;
    e.older = lru_newest_;
    e.newer = nullptr;
    if (lru_newest_)
      lru_newest_->newer = &e;
    else
      lru_oldest_ = &e;
    lru_newest_ = &e;
    e.listed = true;
  }

  void unlist(entry& e) noexcept {
    if (!e.listed) return;
    (e.older ? e.older->newer : lru_oldest_) = e.newer;
    (e.newer ? e.newer->older : lru_newest_) = e.older;
    e.older = e.newer = nullptr;
    e.listed = false;
  }

  static void reject_all(envelope_base* list, errc code, const char* why) noexcept {
    if (list) reject_all(list, error_ptr(code, why));
  }

  static void reject_all(envelope_base* list, const std::exception_ptr& ep) noexcept {
    while (list) {
      auto* e = static_cast<envelope<T>*>(list);
      list = list->next;
      e->reject(ep);
      e->dispose();
    }
  }

  struct key_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view k) const noexcept { return std::hash<std::string_view>{}(k); }
  };

  system_state* sys_;
  const entity_options options_;
  factory make_;
  mutable std::mutex mutex_;
  // Keyed by a view of the entry's own key.
  std::unordered_map<std::string_view, std::unique_ptr<entry>, key_hash, std::equal_to<>> entries_;
  entry* lru_oldest_ = nullptr;
  entry* lru_newest_ = nullptr;
  std::size_t leaving_ = 0; // entries asked to passivate or passivating
  std::uint64_t tick_ = 0;
  entity_stats stats_;
};

} // namespace troupe::detail
