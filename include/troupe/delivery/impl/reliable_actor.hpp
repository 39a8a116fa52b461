#pragma once

// The longer bodies of `reliable_actor` (troupe/delivery/reliable_actor.hpp):
// the operator's dead-letter calls, loading at start, and the first arrival
// of a delivery (its batch, or its counted failure).

namespace troupe::delivery {

template <class Derived, class State>
task<std::vector<dead_letter>> reliable_actor<Derived, State>::troupe_handle(list_dead_letters) {
  co_return co_await this->storage().async_run([this] {
    std::vector<dead_letter> out;
    const auto prefix = tracker_->prefix() + 'x';
    auto ec = this->storage().scan(tables_.deliveries, prefix, [&](std::string_view k, std::string_view v) {
      std::uint32_t attempts = 0;
      std::int64_t since = 0;
      auto o = detail::decode_outgoing(k.substr(prefix.size()), v, &attempts, &since);
      out.push_back({delivery_id(o.id), o.to, o.manifest, attempts, since});
      return true;
    });
    if (ec) throw error(ec, "listing the dead letters of " + this->pid());
    return out;
  });
}

template <class Derived, class State>
task<bool> reliable_actor<Derived, State>::troupe_handle(requeue r) {
  const auto key = tracker_->dead_key(r.id.str());
  auto value = co_await this->storage().async_run([this, &key, &r] {
    std::optional<std::string> v;
    if (auto ec = this->storage().get(tables_.deliveries, key, v))
      throw error(ec, "reading dead letter " + r.id.str() + " of " + this->pid());
    return v;
  });
  if (!value) co_return false;
  auto o = detail::decode_outgoing(r.id.str(), *value);
  const bool in_time = refuse_late_requeue(o, r.force);
  if (auto holder = tracker_->holder(o.id))
    throw error(errc::id_in_use, "re-queue of " + o.id + " from " + this->pid() + " to " + o.to +
                                     " refused: a delivery under that ID is unconfirmed to " + *holder);
  // A fresh horizon from now; the first record time stays (the check
  // above made sure that the receiver's mark, if it processed the
  // delivery, outlives the new horizon).
  o.created_ms = troupe::detail::now_ms();
  // Forced past the check: the operator accepts a second processing; a
  // fresh first record time lets the receiver take it (a mark it still
  // has answers it), where it would refuse a copy it may have forgotten.
  if (!in_time) o.first_ms = o.created_ms;
  if (!tracker_->try_reserve(1)) co_await wait_for_room(1);
  tracker_->claim(o.id, o.to);
  std::vector<persistence::table_write> tables;
  tables.push_back(persistence::table_write::erase(tables_.deliveries, key));
  tables.push_back(
      persistence::table_write::put(tables_.deliveries, tracker_->pending_key(o.id), detail::encode_outgoing(o)));
  tables.push_back(tracker_->work_mark());
  try {
    co_await this->persist_all_with(std::move(tables));
  } catch (...) {
    tracker_->unclaim(o.id);
    throw;
  }
  tracker_->revived(o.id);
  tracker_->add_reserved(std::move(o), true); // its write carried the mark
  co_return true;
}

template <class Derived, class State>
std::vector<detail::outgoing> reliable_actor<Derived, State>::load(std::unordered_map<std::string, std::string>& dead) {
  std::vector<detail::outgoing> pending;
  const auto prefix = detail::key_prefix(this->pid());
  const auto pending_prefix = prefix + 'p';
  auto ec = this->storage().scan(tables_.deliveries, pending_prefix, [&](std::string_view k, std::string_view v) {
    pending.push_back(detail::decode_outgoing(k.substr(pending_prefix.size()), v));
    return true;
  });
  if (ec) throw error(ec, "loading the deliveries of " + this->pid());
  // The dead letters' IDs stay taken for their receivers (a delivery to
  // another under one would replace the dead letter).
  const auto dead_prefix = prefix + 'x';
  ec = this->storage().scan(tables_.deliveries, dead_prefix, [&](std::string_view k, std::string_view v) {
    auto o = detail::decode_outgoing(k.substr(dead_prefix.size()), v);
    dead.emplace(std::move(o.id), std::move(o.to));
    return true;
  });
  if (ec) throw error(ec, "loading the dead letters of " + this->pid());
  if constexpr (receives())
    if (tables_.dedup_by_id) move_marks_by_id(prefix);
  return pending;
}

template <class Derived, class State>
void reliable_actor<Derived, State>::move_marks_by_id(const std::string& prefix) {
  std::vector<persistence::table_write> moves;
  auto ec = this->storage().scan(*tables_.dedup_by_id, prefix, [&](std::string_view k, std::string_view v) {
    moves.push_back(persistence::table_write::put(tables_.dedup,
                                                  prefix + detail::mark_key({}, k.substr(prefix.size())),
                                                  std::string(v)));
    moves.push_back(persistence::table_write::erase(*tables_.dedup_by_id, std::string(k)));
    return true;
  });
  if (ec) throw error(ec, "reading the dedup marks of " + this->pid() + " in the first layout");
  if (moves.empty()) return;
  std::promise<std::error_code> done;
  auto written = done.get_future();
  this->storage().write({}, {}, std::move(moves), [&done](std::error_code e) { done.set_value(e); });
  if (auto e = written.get()) throw error(e, "moving the dedup marks of " + this->pid() + " to the current layout");
}

template <class Derived, class State>
template <class M>
task<> reliable_actor<Derived, State>::receive_as(message& m, std::string& key) {
  static_assert(handles<Derived, delivery<M>>,
                "troupe: a reliable actor that accepts M needs handle(troupe::delivery::delivery<M>)");
  std::optional<M> msg;
  try {
    msg.emplace(persistence::from_json_text<M>(m.payload));
  } catch (const std::exception& ex) {
    ++rejected_;
    net_->unaccepted(troupe::detail::type_name<Derived>(), this->pid(), m, describe(accepted_of<Derived>{}),
                     "its payload does not read as " + std::string(M::manifest) + ": " + ex.what());
    co_return;
  }
  auto run = co_await run_first<M>(m, key, std::move(*msg), true);
  if (run.failed || run.unmarked) co_return;
  net_->send(acknowledgement{m.from, this->pid(), m.id, std::move(run.reply)});
}

template <class Derived, class State>
template <class M>
task<typename reliable_actor<Derived, State>::first_run>
reliable_actor<Derived, State>::run_first(const message& m, std::string& key, M msg, bool acknowledge_rejection) {
  delivery<M> d{m.id, m.from, std::move(msg)};
  this->begin_batch();
  std::optional<std::string> reply;
  std::exception_ptr failure;
  try {
    using R = reply_type_t<Derived, delivery<M>>;
    auto& self = static_cast<Derived&>(*this);
    auto run =
        troupe::detail::call_or_await([&self, &d] { return troupe::detail::invoke_handle(self, std::move(d)); });
    if constexpr (std::is_void_v<R>) {
      co_await std::move(run);
    } else {
      R r = co_await std::move(run);
      reply = persistence::to_json_text(r);
    }
  } catch (...) {
    this->abort_batch();
    failure = std::current_exception();
  }
  if (failure) {
    auto mk = co_await handler_failed(m, key, failure, acknowledge_rejection);
    first_run out;
    out.unmarked = !mk;
    out.failed = std::move(mk);
    co_return out;
  }
  detail::dedup_marks::mark mk;
  mk.reply = reply;
  mk.time_ms = mark_time(m);
  std::vector<persistence::table_write> tables;
  tables.push_back(
      persistence::table_write::put(tables_.dedup, dedup_key(key), detail::encode_mark(mk.time_ms, reply)));
  co_await this->commit_batch(std::move(tables));
  ++processed_;
  marks_.add(std::move(key), std::move(mk));
  first_run out;
  out.reply = std::move(reply);
  co_return out;
}

template <class Derived, class State>
template <class M>
task<reply_type_t<Derived, delivery<M>>> reliable_actor<Derived, State>::run_command(command<M> c) {
  using R = reply_type_t<Derived, delivery<M>>;
  auto fail = [](std::error_code ec, std::string what) {
    return troupe::detail::ask_failure{std::make_exception_ptr(error(ec, std::move(what)))};
  };
  if (c.client.size() > max_client_size)
    throw fail(troupe::errc::invalid_argument, "command " + c.id.str() + " to " + this->pid() +
                                                   ": its client name is over " + std::to_string(max_client_size) +
                                                   " bytes");
  message m{this->pid(), command_sender(c.client), std::move(c.id), std::string(M::manifest),
            persistence::version_of<M>(), {}};
  m.recorded_ms = std::max<std::int64_t>(c.first_sent_ms, 0);
  auto key = detail::mark_key(m.from, m.id.str());
  std::optional<std::string> reply;
  const auto* mark = co_await find_mark(m, key, false);
  if (mark && mark->answers()) {
    ++duplicates_;
    if (mark->what == detail::dedup_marks::mark::state::rejected)
      throw fail(errc::rejected, "command " + m.id.str() + " from " + c.client + " to " + this->pid() +
                                     " was rejected: " + mark->reason);
    reply = mark->reply; // a copy: the pointer dies with the next mark
  } else {
    if (!mark && may_have_forgotten(m))
      throw fail(errc::request_expired,
                 "command " + m.id.str() + " from " + c.client + " to " + this->pid() + " first sent at " +
                     std::to_string(m.recorded_ms) +
                     " ms: the receiver keeps its marks for its dedup retention from then, and its store has "
                     "dropped expired marks up to " +
                     std::to_string(this->storage().expired_through()) +
                     " ms; not run, so that it never runs twice (send it under a new request ID to run it)");
    auto run = co_await run_first<M>(m, key, std::move(c.message), false);
    if (run.failed && run.failed->what == detail::dedup_marks::mark::state::rejected)
      throw fail(errc::rejected, "command " + m.id.str() + " from " + c.client + " to " + this->pid() +
                                     " was rejected: " + run.failed->reason);
    if (run.failed || run.unmarked)
      throw fail(troupe::errc::handler_failed,
                 "command " + m.id.str() + " from " + c.client + " to " + this->pid() + ": " +
                     (run.failed ? run.failed->reason
                                 : std::string("the handler failed, and its failure could not be counted")));
    reply = std::move(run.reply);
  }
  if constexpr (!std::is_void_v<R>) {
    if (!reply)
      throw fail(troupe::errc::invalid_argument,
                 "command " + m.id.str() + " to " + this->pid() + " was answered before without a reply");
    // The first answer too: byte for byte what a retry gets.
    co_return persistence::from_json_text<R>(*reply);
  }
}

template <class Derived, class State>
task<std::optional<detail::dedup_marks::mark>>
reliable_actor<Derived, State>::handler_failed(const message& m, const std::string& key, std::exception_ptr failure,
                                               bool acknowledge_rejection) {
  ++handler_failures_;
  std::string reason;
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& ex) {
    reason = ex.what();
  } catch (...) {
    reason = "the handler threw a non-standard exception";
  }
  if (reason.size() > 1024) reason.resize(1024);
  const auto* known = marks_.find(key);
  detail::dedup_marks::mark mk;
  mk.time_ms = mark_time(m);
  mk.failures = (known ? known->failures : 0) + 1;
  mk.reason = "handler of " + m.manifest + " failed " + std::to_string(mk.failures) + " time(s); last: " + reason;
  // The library's own deliveries (effect outcomes) are never rejected:
  // the owner must learn them; they are redelivered until it can.
  const auto limit = options_.max_handler_failures;
  const bool own = std::string_view(m.manifest).starts_with("troupe.");
  mk.what = !own && limit != 0 && mk.failures >= limit ? detail::dedup_marks::mark::state::rejected
                                                       : detail::dedup_marks::mark::state::failing;
  const bool rejected = mk.what == detail::dedup_marks::mark::state::rejected;
  // Table-only, past the actor's own persist (which refuses after a
  // batch whose events were not written).
  std::vector<persistence::table_write> tables;
  tables.push_back(persistence::table_write::put(
      tables_.dedup, dedup_key(key), detail::encode_failure(rejected, mk.time_ms, mk.failures, mk.reason)));
  auto [ec] = co_await this->storage().async_write(std::string(), std::vector<persistence::event_record>(),
                                                   std::move(tables),
                                                   asio::experimental::as_tuple(asio::use_awaitable));
  std::optional<detail::dedup_marks::mark> written;
  if (!ec) {
    if (rejected) {
      ++poison_rejected_;
      if (acknowledge_rejection) net_->send(acknowledgement{m.from, this->pid(), m.id, std::nullopt, mk.reason});
    }
    written = mk;
    marks_.add(key, std::move(mk));
  }
  if (!this->persisting_refused()) co_return written;
  // The failed batch's events are in the state, not in the store: the
  // state is recovered again from the store, in place. A restart would do
  // that too, but each would count against the supervisor's budget (two
  // such deliveries would stop the receiver under the defaults). Only if
  // the failure was not counted, or the recovery fails, is the failure
  // the supervisor's.
  if (ec) std::rethrow_exception(failure);
  bool recovered = true;
  try {
    co_await this->recover_in_place();
  } catch (...) {
    recovered = false;
  }
  if (!recovered) std::rethrow_exception(failure);
  co_return written;
}

} // namespace troupe::delivery
