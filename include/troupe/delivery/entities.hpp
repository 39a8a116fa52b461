#pragma once

/// \file
/// `troupe::delivery::entities`: reliable actors as entities — reached by
/// deliveries whether they are live or not, passivated when idle, resumed
/// after a restart only if they have work.

#include <troupe/actor_system.hpp>
#include <troupe/entity.hpp>
#include <troupe/error.hpp>
#include <troupe/delivery/policy.hpp>
#include <troupe/delivery/transport.hpp>
#include <troupe/delivery/detail/codec.hpp>
#include <troupe/delivery/detail/outgoing_tracker.hpp>
#include <troupe/persistence/journal.hpp>
#include <troupe/persistence/work_index.hpp>
#include <troupe/detail/bytes.hpp>
#include <troupe/detail/type_name.hpp>

#include <future>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace troupe::delivery {

namespace detail {

/// Once per store: the senders that recorded deliveries before the work
/// index existed are marked in it, with the index's own key that says so,
/// in one atomic write (a crash before it leaves nothing half-built).
/// Indexed again once in a store built before version 0.3 (its key's value
/// empty): a sender that passivated before its confirmation's clearing was
/// written could lose its mark then. Blocking.
inline constexpr std::string_view index_version = "2";
inline void index_senders(persistence::journal& j) {
  const auto t = tables::of(j);
  const persistence::work_index work(t.work);
  std::optional<std::string> built;
  if (auto ec = j.get(t.work, work.built_key(work_reason), built))
    throw error(ec, "reading the work index");
  if (built && *built == index_version) return;
  std::set<std::string> senders;
  auto ec = j.scan(t.deliveries, {}, [&](std::string_view k, std::string_view) {
    // The sender's prefixed ID, then 'p' for a pending delivery.
    const auto n = troupe::detail::prefixed_length(k);
    if (n != 0 && n < k.size() && k[n] == 'p') senders.emplace(k.substr(2, n - 2));
    return true;
  });
  if (ec) throw error(ec, "reading the deliveries to build the work index");
  std::vector<persistence::table_write> marks;
  for (auto& s : senders) marks.push_back(work.mark(s, work_reason));
  marks.push_back(
      persistence::table_write::put(t.work, work.built_key(work_reason), std::string(index_version)));
  std::promise<std::error_code> done;
  auto written = done.get_future();
  j.write({}, {}, std::move(marks), [&done](std::error_code e) { done.set_value(e); });
  if (auto e = written.get()) throw error(e, "writing the work index of the recorded deliveries");
}

} // namespace detail

/// Makes the reliable actors of type `T` (a `reliable_actor` or an
/// `effectful_actor`) entities of `sys` (`actor_system::entities`), named by
/// persistence IDs that start with `prefix`, and returns their region:
///
/// - a delivery to such a name activates its receiver when it is not live
///   (the transport routes it to the region);
/// - the transport knows their policy, `delivery`, by the prefix (the
///   retention checks of `transport::admit` hold for them while they are
///   passivated; `requeue` can tell their retention); every activation
///   gets it: a constructor that takes no `delivery_options` is given
///   these, one that passes others fails to activate (`invalid_argument`);
/// - an entity with unconfirmed deliveries declines passivation, and is
///   marked in the work index from the write that records its first
///   unconfirmed delivery to the one that removes its last: after a
///   restart, `persistence::resume(journal, region, prefix)` activates
///   exactly the senders with work (and the application's own marks).
///
/// Each activation is constructed as `actor_system::entities` does it
/// (context, `persistence_id`, then copies of `args`). Blocking (the first
/// time in a store written without the index, it builds the index from the
/// recorded deliveries): call it while setting the system up, not from an
/// actor. Throws `invalid_argument` for an empty prefix, a policy the
/// transport refuses, or a second region of `T`.
///
/// \code
/// td::delivery_options o;
/// auto orders = td::entities<order>(sys, "order-", o, troupe::entity_options{.idle_timeout = 30s});
/// tp::resume(journal, orders, "order-", asio::use_future).get();
/// \endcode
template <class T, class... Args>
entity_region<T> entities(actor_system& sys, std::string prefix, const delivery_options& delivery,
                          entity_options options, Args&&... args) {
  if (prefix.empty())
    throw error(troupe::errc::invalid_argument,
                "delivery::entities<" + std::string(troupe::detail::type_name<T>()) + ">: the prefix is empty");
  auto net = sys.extension<transport>();
  if (!net)
    throw error(troupe::errc::invalid_argument,
                "the actor system has no delivery transport: call troupe::delivery::set_transport(system) before "
                "delivery::entities");
  auto j = sys.extension<persistence::journal>();
  if (!j)
    throw error(troupe::errc::invalid_argument,
                "the actor system has no journal: call troupe::persistence::set_journal(system, journal) before "
                "delivery::entities");
  detail::index_senders(*j);
  std::optional<std::chrono::milliseconds> retention;
  if constexpr (requires { typename T::accepts; } || requires { typename T::troupe_accepts; })
    retention = delivery.dedup.retention;
  auto kept = sys.extension_or<detail::entity_policy<T>>(
      [&] { return std::make_shared<detail::entity_policy<T>>(detail::entity_policy<T>{prefix, delivery}); });
  if (kept->prefix != prefix || !(kept->options == delivery))
    throw error(troupe::errc::invalid_argument, "delivery::entities<" + std::string(troupe::detail::type_name<T>()) +
                                                    ">: entities of that type are already in this actor system");
  net->admit_entities(prefix, delivery.redelivery.horizon(), retention);
  auto region = sys.entities<T>(std::move(options), std::forward<Args>(args)...);
  net->route(prefix, [region](message m) {
    auto to = m.to;
    // Dropped if the system is shutting down: the sender redelivers.
    (void)region.get(std::move(to)).tell(detail::inbound{std::move(m)});
  });
  return region;
}

} // namespace troupe::delivery
