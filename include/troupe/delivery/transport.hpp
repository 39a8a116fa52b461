#pragma once

/// \file
/// How reliable deliveries and their acknowledgements travel: the
/// `transport` interface, the in-process `local_transport`, and
/// `set_transport`, which gives an actor system its transport.

#include <troupe/actor_system.hpp>
#include <troupe/error.hpp>
#include <troupe/delivery/delivery_id.hpp>
#include <troupe/detail/compile_mode.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace troupe::delivery {

/// One attempt of a delivery, as it travels: the same ID on every attempt.
struct message {
  /// The receiver's name (its persistence ID).
  std::string to;
  /// The sender's name (its persistence ID), where the acknowledgement goes.
  std::string from;
  delivery_id id;
  /// The message type's stable name and version, and its JSON text.
  std::string manifest;
  std::uint32_t version = 1;
  std::string payload;
  /// When the sender first recorded the delivery (its wall clock, ms since
  /// the epoch; a re-queue keeps it). The receiver's mark counts its
  /// retention from this time at the earliest, and a copy that finds no
  /// mark is processed only while no mark of it can have been dropped
  /// (`journal::expired_through`). 0: unknown (the mark counts from its
  /// processing, as before). A transport between processes carries it.
  std::int64_t recorded_ms = 0;
};

/// The receiver's answer once the delivery's effects are durable (or it
/// recognised a duplicate): the sender may stop redelivering.
struct acknowledgement {
  /// The sender's name.
  std::string to;
  /// The receiver's name.
  std::string from;
  delivery_id id;
  /// The handler's reply as JSON text, if it returned one.
  std::optional<std::string> reply;
  /// Set when the receiver rejected the delivery (see
  /// `delivery_rejected`): why. No reply then.
  std::optional<std::string> rejection{};
  /// The receiver did not process this copy and never will: it found no
  /// mark, and a mark of the delivery may have been dropped (its first
  /// record time plus the receiver's retention is at or before the store's
  /// expiry floor). The sender makes the delivery a dead letter;
  /// `rejection` says why.
  bool expired = false;
};

/// Where a transport hands what arrives for one name. Both calls may come
/// from any thread and must not block.
class endpoint {
public:
  virtual ~endpoint() = default;
  virtual void receive(message m) = 0;
  virtual void acknowledge(acknowledgement a) = 0;
};

/// Carries messages and acknowledgements between named endpoints, with no
/// guarantee: it may lose, duplicate, reorder or delay them (the reliable
/// actors on both ends make up for it). Thread-safe.
///
/// It also keeps the redelivery horizons and dedup retentions of the
/// reliable actors that use it, and refuses a receiver that would forget a
/// delivery ID while a sender may still redeliver it (see `admit`).
class transport {
public:
  virtual ~transport() = default;

  /// What arrives for `name` goes to `e` from now on (replacing an earlier
  /// binding).
  virtual void bind(const std::string& name, std::shared_ptr<endpoint> e) = 0;
  /// Removes `name`'s binding if it is still `e`.
  virtual void unbind(const std::string& name, const endpoint* e) = 0;
  virtual void send(message m) = 0;
  virtual void send(acknowledgement a) = 0;

  /// Records that the reliable actor `name` may redeliver for up to
  /// `horizon` after a first attempt (its maximum attempts × maximum
  /// backoff; `max()`: without end) and, if it receives, keeps dedup marks
  /// for `retention` (`max()`: forever). Throws `invalid_argument` naming
  /// both actors, and records nothing, if some receiver known here would
  /// forget a delivery ID while some sender may still redeliver it.
  /// O(log n) in the admissions: only the shortest retention and the
  /// longest horizon of the others need checking. A name admitted again (an
  /// actor restarted) replaces its admission; `forget` removes it.
  void admit(const std::string& name, std::chrono::milliseconds horizon,
             std::optional<std::chrono::milliseconds> retention) {
    refuse_reserved(name, false);
    std::lock_guard g(policies_mutex_);
    admit_locked({false, name}, horizon, retention);
  }

  /// As `admit`, for every reliable actor whose name starts with `prefix`
  /// (the entities of one type: their policy stays known while they are
  /// passivated, for `retention_of`, `knows` and the checks of `admit`).
  void admit_entities(const std::string& prefix, std::chrono::milliseconds horizon,
                      std::optional<std::chrono::milliseconds> retention) {
    refuse_reserved(prefix, true);
    std::lock_guard g(policies_mutex_);
    admit_locked({true, prefix}, horizon, retention);
  }

  /// Throws `invalid_argument` for a name that may stand for the sender of
  /// commands from outside (`command_sender`), or for an entity prefix
  /// some of whose names may: such a reliable actor would share its dedup
  /// marks with a client's commands. An exact name like `troupe.` is not
  /// a client's; a prefix like `troupe.` covers some.
  static void refuse_reserved(const std::string& name, bool is_prefix) {
    constexpr std::string_view reserved = "troupe.command:";
    if (name.starts_with(reserved) || (is_prefix && reserved.starts_with(name)))
      throw error(troupe::errc::invalid_argument,
                  "the reliable actor name " + name + " is reserved: names starting with troupe.command: stand "
                  "for the clients of commands from outside");
  }

  /// Forgets the admission of `name` (its actor has gone: the registry
  /// holds the live ones and the entity types, never every name ever
  /// admitted).
  void forget(const std::string& name) {
    std::lock_guard g(policies_mutex_);
    forget_locked({false, name});
  }

  /// The dedup retention `admit` recorded for the receiver `name` (or for
  /// the entities whose prefix it has, the longest prefix first), if any.
  std::optional<std::chrono::milliseconds> retention_of(std::string_view name) {
    std::lock_guard g(policies_mutex_);
    const auto* p = policy_of(name);
    return p ? p->retention : std::nullopt;
  }

  /// Whether `name` was admitted (by name or by prefix: its horizon is
  /// known here); the first time a receiver hears from a sender that was
  /// not, the transport warns (`warn`): the retention rule cannot be
  /// checked for it.
  bool knows(std::string_view name) {
    std::lock_guard g(policies_mutex_);
    return policy_of(name) != nullptr;
  }

  /// Admissions held: names and entity prefixes (for monitoring and tests).
  std::size_t admissions() {
    std::lock_guard g(policies_mutex_);
    return policies_.size();
  }

  // -- entities ---------------------------------------------------------------

  /// Deliveries to a name that starts with `prefix` and has no endpoint
  /// bound go to `to` (an entity region, which activates the receiver);
  /// the longest matching prefix wins. Acknowledgements to such a name are
  /// dropped (a sender with unconfirmed deliveries stays live, or is
  /// activated again after a restart, and hears of them from its next
  /// redelivery). Thread-safe; a later route of the same prefix replaces it.
  virtual void route(const std::string& prefix, std::function<void(message)> to) = 0;

  /// What the transport says when something is wrong but goes on: by
  /// default a line on standard error; replace it with `on_warning`.
  void warn(const std::string& what);

  void on_warning(std::function<void(const std::string&)> f) {
    std::lock_guard g(policies_mutex_);
    warning_ = std::move(f);
  }

  /// The most sender names `unknown_sender` warns about (and remembers).
  static constexpr std::size_t max_warned_senders = 1024;

  /// Warns once per sender name not admitted here (see `knows`). Returns
  /// whether `sender` is admitted (then it never warns about it).
  bool unknown_sender(const std::string& sender, const std::string& receiver);

  /// Warns once per receiver class, manifest and version that a reliable
  /// actor does not take a delivery (`why`: its type is not in the actor's
  /// `accepts`, another version of it, or a payload that does not read as
  /// it); the delivery is not acknowledged, and its sender redelivers it
  /// until it gives up. At most `max_warned_senders` kinds are remembered.
  void unaccepted(std::string_view receiver_class, const std::string& receiver, const message& m,
                  const std::string& accepted, const std::string& why);

private:
  static std::string show(std::chrono::milliseconds d);

  static error refusal(const std::string& sender, std::chrono::milliseconds horizon, const std::string& receiver,
                       std::chrono::milliseconds retention);

  /// A name, or a prefix of names (entities).
  struct admitted {
    bool prefix = false;
    std::string name;
    friend auto operator<=>(const admitted&, const admitted&) = default;
  };
  /// An `admitted` to look up by, without a copy of the name.
  struct admitted_view {
    bool prefix = false;
    std::string_view name;
  };
  struct by_admitted {
    using is_transparent = void;
    static admitted_view view(const admitted& a) noexcept { return {a.prefix, a.name}; }
    static admitted_view view(const admitted_view& a) noexcept { return a; }
    template <class A, class B> bool operator()(const A& a, const B& b) const noexcept {
      const auto x = view(a), y = view(b);
      return x.prefix != y.prefix ? x.prefix < y.prefix : x.name < y.name;
    }
  };
  struct policy {
    std::chrono::milliseconds horizon{};
    std::optional<std::chrono::milliseconds> retention;
  };

  void admit_locked(const admitted& who, std::chrono::milliseconds horizon,
                    std::optional<std::chrono::milliseconds> retention);

  void forget_locked(const admitted& who);

  /// The policy of `name`: its own, or its longest admitted prefix's.
  const policy* policy_of(std::string_view name) const;

  std::mutex policies_mutex_;
  std::map<admitted, policy, by_admitted> policies_;
  std::map<std::size_t, std::size_t> prefix_lengths_; // length of admitted prefixes -> how many

  // The same, ordered by value (the shortest retention and the longest
  // horizon are what `admit` checks).
  std::set<std::pair<std::chrono::milliseconds, admitted>> by_horizon_, by_retention_;
  std::unordered_set<std::string> warned_;
  bool warned_enough_ = false; // max_warned_senders were named: no more
  std::unordered_set<std::string> warned_unaccepted_; // receiver class, manifest, version (unaccepted)
  std::function<void(const std::string&)> warning_;
};

/// Delivers within one process, at once, to whatever is bound to the name
/// (nothing, while the receiver is stopped or restarting: the sender
/// redelivers).
class local_transport final : public transport {
public:
  void bind(const std::string& name, std::shared_ptr<endpoint> e) override;

  void unbind(const std::string& name, const endpoint* e) override;

  void send(message m) override;

  void route(const std::string& prefix, std::function<void(message)> to) override;

  void send(acknowledgement a) override;

private:
  std::shared_ptr<endpoint> find(const std::string& name);

  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<endpoint>> endpoints_;
  std::vector<std::pair<std::string, std::function<void(message)>>> routes_; // few: one per entity type
};

/// Makes `t` (by default a new `local_transport`) the transport of every
/// reliable actor of `sys`. Returns it.
TROUPE_DECL std::shared_ptr<transport> set_transport(actor_system& sys, std::shared_ptr<transport> t = nullptr);

} // namespace troupe::delivery

#if defined(TROUPE_HEADER_ONLY)
#include <troupe/delivery/impl/transport.ipp>
#endif
