#pragma once

// The definitions of `transport`'s bookkeeping and of `local_transport`
// (troupe/delivery/transport.hpp): no user type in them, so with
// TROUPE_SEPARATE_COMPILATION they are compiled once
// (<troupe/delivery/impl/src.hpp>); header-only, that header includes this
// file.

#include <troupe/delivery/transport.hpp>

namespace troupe::delivery {

TROUPE_DECL void transport::warn(const std::string& what) {
  std::function<void(const std::string&)> f;
  {
    std::lock_guard g(policies_mutex_);
    f = warning_;
  }
  if (f)
    f(what);
  else
    std::fprintf(stderr, "troupe: warning: %s\n", what.c_str());
}

TROUPE_DECL bool transport::unknown_sender(const std::string& sender, const std::string& receiver) {
  bool last = false;
  {
    std::lock_guard g(policies_mutex_);
    if (policy_of(sender)) return true;
    if (warned_.contains(sender) || warned_enough_) return false;
    // Past the limit, the names are forgotten: one last warning says so.
    last = warned_.size() == max_warned_senders;
    if (last) {
      warned_enough_ = true;
      warned_ = {};
    } else {
      warned_.insert(sender);
    }
  }
  if (last)
    warn("reliable actor " + receiver + " received a delivery from " + sender + ", after " +
         std::to_string(max_warned_senders) +
         " other senders whose redelivery horizon this transport does not know: no further unknown senders are "
         "named");
  else
    warn("reliable actor " + receiver + " received a delivery from " + sender +
         ", whose redelivery horizon this transport does not know: the dedup retention of " + receiver +
         " cannot be checked against it (a copy sent after the retention would be processed again)");
  return false;
}

TROUPE_DECL void transport::unaccepted(std::string_view receiver_class, const std::string& receiver, const message& m,
                                       const std::string& accepted, const std::string& why) {
  {
    std::lock_guard g(policies_mutex_);
    if (warned_unaccepted_.size() >= max_warned_senders) return;
    auto k = std::string(receiver_class) + '\0' + m.manifest + '\0' + std::to_string(m.version);
    if (!warned_unaccepted_.insert(std::move(k)).second) return;
  }
  warn("reliable actor " + receiver + " (" + std::string(receiver_class) + ") does not take delivery " + m.id.str() +
       " from " + m.from + ": " + why + " (it accepts " + accepted + "); it is not acknowledged, and " + m.from +
       " redelivers it until it gives up (warned once per actor class and message)");
}

TROUPE_DECL std::string transport::show(std::chrono::milliseconds d) {
  return d == std::chrono::milliseconds::max() ? std::string("unlimited") : std::to_string(d.count()) + " ms";
}

TROUPE_DECL error transport::refusal(const std::string& sender, std::chrono::milliseconds horizon,
                                     const std::string& receiver, std::chrono::milliseconds retention) {
  return error(troupe::errc::invalid_argument,
               "dedup retention of receiver " + receiver + " (" + show(retention) +
                   ") is shorter than the redelivery horizon of sender " + sender + " (" + show(horizon) +
                   ", max attempts x max backoff): a late redelivery would be processed twice");
}

TROUPE_DECL void transport::admit_locked(const admitted& who, std::chrono::milliseconds horizon,
                                         std::optional<std::chrono::milliseconds> retention) {
  const auto label = [](const admitted& a) { return a.prefix ? "the entities " + a.name + "*" : a.name; };
  // The shortest retention and the longest horizon of the others.
  for (auto& [r, other] : by_retention_)
    if (other != who) {
      if (r < horizon) throw refusal(label(who), horizon, label(other), r);
      break;
    }
  if (retention) {
    if (*retention < horizon) throw refusal(label(who), horizon, label(who), *retention);
    for (auto it = by_horizon_.rbegin(); it != by_horizon_.rend(); ++it)
      if (it->second != who) {
        if (*retention < it->first) throw refusal(label(it->second), it->first, label(who), *retention);
        break;
      }
  }
  forget_locked(who);
  // (Counted first: should the emplace throw, a length too many costs a
  // lookup, one too few would hide a prefix.)
  if (who.prefix) ++prefix_lengths_[who.name.size()];
  policies_.emplace(who, policy{horizon, retention});
  by_horizon_.emplace(horizon, who);
  if (retention) by_retention_.emplace(*retention, who);
}

TROUPE_DECL void transport::forget_locked(const admitted& who) {
  auto it = policies_.find(who);
  if (it == policies_.end()) return;
  by_horizon_.erase({it->second.horizon, who});
  if (it->second.retention) by_retention_.erase({*it->second.retention, who});
  if (who.prefix)
    if (auto l = prefix_lengths_.find(who.name.size()); l != prefix_lengths_.end() && --l->second == 0)
      prefix_lengths_.erase(l);
  policies_.erase(it);
}

TROUPE_DECL const transport::policy* transport::policy_of(std::string_view name) const {
  if (auto it = policies_.find(admitted_view{false, name}); it != policies_.end()) return &it->second;
  // Only the lengths some prefix has, the longest first; no copy of the
  // name (a store's compactions ask this for every dedup mark).
  for (auto l = prefix_lengths_.rbegin(); l != prefix_lengths_.rend(); ++l)
    if (l->first > 0 && l->first <= name.size())
      if (auto it = policies_.find(admitted_view{true, name.substr(0, l->first)}); it != policies_.end())
        return &it->second;
  return nullptr;
}

TROUPE_DECL void local_transport::bind(const std::string& name, std::shared_ptr<endpoint> e) {
  std::lock_guard g(mutex_);
  endpoints_[name] = std::move(e);
}

TROUPE_DECL void local_transport::unbind(const std::string& name, const endpoint* e) {
  std::lock_guard g(mutex_);
  if (auto it = endpoints_.find(name); it != endpoints_.end() && it->second.get() == e) endpoints_.erase(it);
}

TROUPE_DECL void local_transport::send(message m) {
  if (auto e = find(m.to)) return e->receive(std::move(m));
  std::function<void(message)> to;
  {
    std::lock_guard g(mutex_);
    std::size_t best = 0;
    for (auto& [prefix, r] : routes_)
      if (m.to.starts_with(prefix) && (!to || prefix.size() > best)) {
        to = r;
        best = prefix.size();
      }
  }
  if (to) to(std::move(m));
}

TROUPE_DECL void local_transport::route(const std::string& prefix, std::function<void(message)> to) {
  std::lock_guard g(mutex_);
  for (auto& [p, r] : routes_)
    if (p == prefix) {
      r = std::move(to);
      return;
    }
  routes_.emplace_back(prefix, std::move(to));
}

TROUPE_DECL void local_transport::send(acknowledgement a) {
  if (auto e = find(a.to)) e->acknowledge(std::move(a));
}

TROUPE_DECL std::shared_ptr<endpoint> local_transport::find(const std::string& name) {
  std::lock_guard g(mutex_);
  auto it = endpoints_.find(name);
  return it == endpoints_.end() ? nullptr : it->second;
}

TROUPE_DECL std::shared_ptr<transport> set_transport(actor_system& sys, std::shared_ptr<transport> t) {
  if (!t) t = std::make_shared<local_transport>();
  sys.set_extension<transport>(t);
  return t;
}

} // namespace troupe::delivery
