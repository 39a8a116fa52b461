#pragma once

/// \file
/// `troupe::effects::effectful_actor`: a persistent actor that starts side
/// effects on external systems through the outbox and learns their
/// outcomes as events. See docs/effects.md.

#include <troupe/error.hpp>
#include <troupe/task.hpp>
#include <troupe/delivery/reliable_actor.hpp>
#include <troupe/effects/dispatcher.hpp>
#include <troupe/effects/effect.hpp>
#include <troupe/effects/detail/outbox.hpp>
#include <troupe/persistence/json.hpp>
#include <troupe/detail/clock.hpp>
#include <troupe/detail/maybe_await.hpp>

#include <algorithm>
#include <concepts>
#include <string>
#include <string_view>
#include <utility>

namespace troupe::effects {

/// A request for an effect: JSON-convertible, with the effect type (the
/// adapter that performs it).
///
/// \code
/// struct charge {
///   static constexpr std::string_view effect_type = "payment";
///   long amount;
/// };
/// \endcode
template <class R>
concept effect_request = requires {
  { R::effect_type } -> std::convertible_to<std::string_view>;
} && boost::json::has_value_from<R>::value;

/// The longest operation ID accepted, in bytes.
inline constexpr std::size_t max_operation_id = 900;
/// What an outcome's delivery ID adds to the escaped operation ID at most:
/// `:` round (10 digits) `:` status.
inline constexpr std::size_t outcome_id_suffix = 1 + 10 + 1 + 16;

/// Base of a persistent actor whose state holds its effects
/// (`effect_table effects;` in `State`).
///
/// `co_await start_effect(id, request, cause...)` writes the cause events,
/// an `effect_requested` event and the outbox record in one atomic write;
/// once that is durable the dispatcher is told (after a crash it finds the
/// record itself). The dispatcher executes it and delivers the outcome; the
/// actor persists it as an `effect_updated` event (with the dedup mark of
/// the delivery, atomically), then calls `Derived::on_effect(const
/// effect&)` if there is one — a plain function or a coroutine — inside the
/// same unit of work, so what it persists or starts is written with the
/// outcome. Nothing of this runs during replay: the events only rebuild
/// `state().effects`.
template <class Derived, class State>
class effectful_actor : public delivery::reliable_actor<Derived, State> {
  using base = delivery::reliable_actor<Derived, State>;

public:
  /// As `reliable_actor`'s: an entity of `delivery::entities<Derived>`
  /// gets the options given there.
  effectful_actor(context<Derived> ctx, persistence::persistence_id id,
                  persistence::persistence_options persistence = {})
      : base(ctx, std::move(id), persistence), outbox_(detail::outbox_table(this->storage())) {}
  effectful_actor(context<Derived> ctx, persistence::persistence_id id, delivery::delivery_options options,
                  persistence::persistence_options persistence = {})
      : base(ctx, std::move(id), options, persistence), outbox_(detail::outbox_table(this->storage())) {}

  using base::troupe_handle; // the delivery layer's messages

  using troupe_events = persistence::event_types<effect_requested, effect_updated>;
  using troupe_accepts = delivery::accepts<effect_update>;

  static void troupe_apply(State& s, const effect_requested& e) { table_of(s).apply(e); }
  static void troupe_apply(State& s, const effect_updated& e) { table_of(s).apply(e); }

  /// An outcome from the dispatcher.
  task<> troupe_handle(delivery::delivery<effect_update> d) {
    auto& u = d.message.change;
    if (!table_of(this->state()).accepts(u)) co_return; // stale or already known: acknowledged, nothing changes
    effect_updated e = std::move(u);
    const auto id = e.id;
    co_await this->persist(std::move(e));
    if constexpr (requires(Derived& x, const effect& f) { x.on_effect(f); }) {
      auto& self = static_cast<Derived&>(*this);
      const effect& f = *table_of(this->state()).find(id);
      auto hook = troupe::detail::call_or_await([&self, &f] { return self.on_effect(f); });
      co_await std::move(hook);
    }
  }

protected:
  /// Starts effect `id` (the stable operation ID, also the idempotency key:
  /// `order:42:payment`) with `request`, atomically with `cause`. False, and
  /// nothing written, if `id` was requested before (a second start is the
  /// same effect). Throws as `persist` does, `invalid_argument` for an
  /// empty or too long ID or a request that does not serialize, and
  /// `errc::id_in_use` for an ID whose record another owner has in the
  /// outbox (an operation ID names one effect of one owner: refused,
  /// nothing written, that owner's record untouched; the store checks it
  /// atomically with the write). An ID is the owner's until its record
  /// expires from the outbox (its retention).
  template <effect_request R, persistence::event... E>
  task<bool> start_effect(std::string id, const R& request, E... cause) {
    if (id.empty())
      throw error(troupe::errc::invalid_argument, "start_effect in " + this->pid() + ": the operation ID is empty");
    if (id.size() > max_operation_id)
      throw error(troupe::errc::invalid_argument, "start_effect in " + this->pid() + ": operation ID of " +
                                                      std::to_string(id.size()) + " bytes; at most " +
                                                      std::to_string(max_operation_id));
    // Its outcomes travel under delivery IDs made of it (':' and '\\'
    // escaped) and a round and status: those must fit too.
    const auto escaped = id.size() + static_cast<std::size_t>(std::count_if(id.begin(), id.end(), [](char c) {
                           return c == ':' || c == '\\';
                         }));
    if (escaped + outcome_id_suffix > delivery::delivery_id::max_size)
      throw error(troupe::errc::invalid_argument,
                  "start_effect in " + this->pid() + ": operation ID of " + std::to_string(id.size()) + " bytes, " +
                      std::to_string(escaped) + " with its ':' and '\\' escaped; its outcomes' delivery IDs need " +
                      "at most " + std::to_string(delivery::delivery_id::max_size - outcome_id_suffix));
    if (table_of(this->state()).status(id) != effect_status::not_requested) co_return false;
    // Read first: a refusal then fails nothing of a batch. The write's own
    // check (`table_write::create`) decides a race between two owners.
    if (auto holder = co_await holder_of(id)) throw held(id, *holder);
    detail::record r;
    r.info.id = id;
    r.info.type = std::string(R::effect_type);
    r.info.owner = this->pid();
    r.info.status = effect_status::pending;
    r.info.created_ms = troupe::detail::now_ms();
    r.due_ms = r.info.created_ms;
    try {
      r.request = persistence::to_json_text(request);
    } catch (const std::exception& ex) {
      throw error(troupe::errc::invalid_argument, "cannot serialize the request of effect " + id + ": " + ex.what());
    }
    std::vector<persistence::table_write> tables;
    tables.push_back(persistence::table_write::create(outbox_, detail::outbox_key(id), detail::encode(r)));
    tables.push_back(detail::pending_entry(outbox_, r));
    effect_requested requested{id, r.info.type};
    bool lost_race = false;
    try {
      co_await this->persist_all_with(std::move(tables), std::move(cause)..., std::move(requested));
    } catch (const error& e) {
      if (e.code() != persistence::errc::key_exists) throw;
      lost_race = true; // (no co_await inside a handler)
    }
    if (lost_race) {
      auto holder = co_await holder_of(id);
      throw held(id, holder.value_or("another owner"));
    }
    this->after_commit([sys = &this->actor_context().system(), r = std::move(r)]() mutable {
      // Without a dispatcher in this system, the record waits in the outbox.
      if (auto d = sys->template extension<detail::dispatcher_slot>())
        (void)d->ref.tell(detail::enqueued{std::move(r)});
    });
    co_return true;
  }

  /// The effect, or null if never requested.
  const effect* find_effect(std::string_view id) const { return table_of(this->state()).find(id); }

private:
  persistence::table outbox_;

  /// The owner the outbox has a record of `id` for, or none.
  task<std::optional<std::string>> holder_of(const std::string& id) {
    auto& j = this->storage();
    const auto key = detail::outbox_key(id);
    std::optional<std::string> v;
    if (!j.try_get(outbox_, key, v)) {
      auto read = [&j, &key, t = outbox_] {
        std::optional<std::string> x;
        if (auto ec = j.get(t, key, x)) throw error(ec, "reading the outbox");
        return x;
      };
      v = co_await j.async_run(std::move(read));
    }
    if (!v) co_return std::nullopt;
    co_return detail::decode(id, *v).info.owner;
  }

  error held(const std::string& id, const std::string& holder) const {
    if (holder == this->pid())
      return error(errc::id_in_use, "start_effect in " + this->pid() + ": operation ID " + id +
                                        " is in the outbox for " + holder +
                                        " already, but not in its state; nothing was written");
    return error(errc::id_in_use, "start_effect in " + this->pid() + " refused: operation ID " + id +
                                      " belongs to " + holder + " (an operation ID names one effect of one owner; " +
                                      holder + "'s record was not touched); give " + this->pid() +
                                      "'s effects IDs of their own");
  }

  template <class S>
  static auto& table_of(S& s) {
    static_assert(
        requires {
          { s.effects } -> std::convertible_to<const effect_table&>;
        }, "troupe: the state of an effectful_actor needs a member `troupe::effects::effect_table effects;`");
    return s.effects;
  }
};

} // namespace troupe::effects
