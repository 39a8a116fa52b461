#pragma once

// Recovery of a persistent actor's state: the latest readable snapshot,
// then the journal's events after it, decoded (upcast where needed) and
// applied in order. Runs on the journal's blocking thread.

#include <troupe/error.hpp>
#include <troupe/hooks.hpp>
#include <troupe/persistence/error.hpp>
#include <troupe/persistence/event.hpp>
#include <troupe/persistence/journal.hpp>
#include <troupe/persistence/json.hpp>
#include <troupe/persistence/options.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/persistence/detail/replay_pipeline.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace troupe::persistence::detail {

/// What a recovery found.
template <class State>
struct recovered {
  State state{};
  /// The last event applied.
  sequence_nr seq = 0;
  /// The snapshot it started from (0: none).
  sequence_nr snapshot = 0;
};

/// Recovery of an actor `Derived` with state `State`: the event types it
/// reads are `Derived::events` and the library's `Derived::troupe_events`.
template <class Derived, class State>
class recovery {
public:
  static constexpr bool snapshottable = json_convertible<State>;

  recovery(journal& j, const std::string& pid, const persistence_options* options = nullptr)
      : journal_(j), pid_(pid), options_(options) {}

  /// Throws `troupe::error` naming the persistence ID, the sequence number
  /// and the manifest of the record that could not be used.
  recovered<State> run() {
    out_ = {};
    // The only writer of the ID from here on (a shared store fences the
    // one before), so that what is read below is all there will be.
    if (auto ec = journal_.claim(pid_)) {
      const auto why = journal_.last_failure();
      throw error(ec, "recovery of " + pid_ + ": claiming it failed" + (why.empty() ? "" : ": " + why));
    }
    if constexpr (snapshottable) load_latest_snapshot();

    using list = typename Derived::events;
    using library = typename troupe::detail::troupe_events_or<Derived, event_types<>>::type;
    auto apply_record = [&](const event_record& r) {
      if (r.manifest == events_lost_manifest) { // numbers a salvage dropped: nothing to apply
        out_.seq = r.seq;
        return;
      }
      if (!dispatch(list{}, r) && !dispatch(library{}, r))
        throw error(errc::corrupt_record,
                    failure(r.seq, r.manifest,
                            "unknown event manifest '" + r.manifest + "' version " + std::to_string(r.version)));
      out_.seq = r.seq;
    };
    // This thread reads; the journal's applier thread decodes and applies.
    replay_pipeline<decltype(apply_record)> pipeline(journal_.applier(), apply_record);
    sequence_nr expected = out_.seq + 1;
    // Progress, when asked for: every so many events read, and at the end.
    const auto* report = options_ && options_->on_recovery_progress ? &options_->on_recovery_progress : nullptr;
    const auto every = options_ ? std::max<std::uint64_t>(1, options_->recovery_progress_every) : 1;
    const auto started = std::chrono::steady_clock::now();
    recovery_progress progress{pid_, 0, report ? journal_.highest_sequence_nr(pid_) : 0, out_.snapshot};
    std::uint64_t replayed = 0;
    auto ec = journal_.replay(pid_, expected, max_sequence_nr, UINT64_MAX, [&](const event_record& r) {
      // A salvage's record covers its numbers (from before a snapshot, too).
      if (r.seq != expected && !(r.manifest == events_lost_manifest && lost_from(r) <= expected)) {
        missing(expected, r.seq - 1);
        throw error(errc::events_missing, failure(r.seq, r.manifest,
                                                  "events " + std::to_string(expected) + " to " +
                                                      std::to_string(r.seq - 1) + " are missing"));
      }
      pipeline.push(r);
      expected = r.seq + 1;
      ++replayed;
      if (report && ++progress.events_read % every == 0) {
        progress.elapsed = std::chrono::steady_clock::now() - started;
        (*report)(progress);
      }
    });
    if (ec) {
      pipeline.abandon();
      auto what = "cannot read the journal: " + ec.message();
      if (auto more = journal_.last_failure(); !more.empty()) what += " (" + more + ")";
      throw error(ec == errc::corrupt_record || ec == errc::storage_full ? ec : std::error_code(errc::storage_failure),
                  failure(expected, {}, what));
    }
    pipeline.finish();
    // Every number up to the highest was written, atomically with the
    // highest itself: anything short of it is a loss, not a gap to skip.
    auto highest = journal_.highest_sequence_nr(pid_);
    if (highest > out_.seq) missing(out_.seq + 1, highest);
    if (highest > out_.seq)
      throw error(errc::events_missing,
                  failure(out_.seq + 1, {},
                          "events " + std::to_string(out_.seq + 1) + " to " + std::to_string(highest) +
                              " are missing (deleted, and no readable snapshot covers them)"));
    journal_.count_recovery(replayed, std::chrono::steady_clock::now() - started);
    if (report) {
      progress.highest = highest;
      progress.elapsed = std::chrono::steady_clock::now() - started;
      progress.done = true;
      (*report)(progress);
    }
    return std::move(out_);
  }

private:
  /// Events `from` to `to` are not in the journal: when a snapshot that
  /// would have covered them could not be used, that is the error to name.
  void missing(sequence_nr from, sequence_nr to) {
    // The snapshots could not be read at all (the store failed): the events
    // are missing because a snapshot replaced them, and the failure is the
    // store's, not a loss.
    if (load_failed_ && !out_.snapshot)
      throw error(load_failed_ == errc::storage_full ? errc::storage_full : errc::storage_failure,
                  failure(from, {},
                          "the snapshots could not be read (" + load_failed_.message() + ") and events " +
                              std::to_string(from) + " to " + std::to_string(to) + " were deleted"));
    if (unreadable_ && unreadable_->first >= from)
      throw error(errc::snapshot_unreadable,
                  failure(unreadable_->first, {},
                          "snapshot " + std::to_string(unreadable_->first) + " cannot be used (" +
                              unreadable_->second + ") and events " + std::to_string(from) + " to " +
                              std::to_string(std::min(to, unreadable_->first)) + " it covers were deleted"));
  }

  /// The first number an `events_lost` record covers.
  sequence_nr lost_from(const event_record& r) const {
    try {
      return boost::json::parse(r.payload).at("from").to_number<sequence_nr>();
    } catch (const std::exception& ex) {
      throw error(errc::corrupt_record, failure(r.seq, r.manifest, std::string("unreadable: ") + ex.what()));
    }
  }

  std::string failure(sequence_nr seq, std::string_view manifest, const std::string& what) const {
    return "recovery of " + pid_ + " failed at sequence number " + std::to_string(seq) +
           (manifest.empty() ? std::string() : " (" + std::string(manifest) + ")") + ": " + what;
  }

  /// The newest snapshot that can be read and decoded; older ones when it
  /// cannot; none when the store cannot say which failed (then the whole
  /// journal is replayed, and fails if its start was deleted).
  void load_latest_snapshot() {
    snapshot_criteria c;
    std::optional<snapshot_record> s;
    for (;;) {
      auto ec = journal_.load_snapshot(pid_, c, s);
      if (!s) {
        if (ec) load_failed_ = ec;
        return;
      }
      if (!ec) {
        try {
          if (auto state = decode_state<State>(*s)) {
            out_.state = std::move(*state);
            out_.seq = out_.snapshot = s->seq;
            return;
          }
          if (!unreadable_)
            unreadable_.emplace(s->seq, "its state version " + std::to_string(s->version) +
                                            " is none this actor reads (current: " +
                                            std::to_string(state_version_of<State>()) + ")");
        } catch (const std::exception& ex) {
          out_.state = State{};
          if (!unreadable_) unreadable_.emplace(s->seq, std::string("does not decode: ") + ex.what());
        }
      } else if (!unreadable_) {
        unreadable_.emplace(s->seq, ec.message());
      }
      if (s->seq == 0) return;
      c.max_seq = s->seq - 1;
    }
  }

  /// The snapshot's state as an `S`, from its own version or, through
  /// `S::upcast`, from an older one in its chain; empty when its version is
  /// none of them. Throws when the payload does not parse.
  template <class S>
  static std::optional<S> decode_state(const snapshot_record& s) {
    if (s.version == state_version_of<S>()) return from_json_text<S>(s.payload);
    if constexpr (state_upcastable<S>) {
      if (auto old = decode_state<typename S::previous>(s)) return S::upcast(std::move(*old));
    }
    return std::nullopt;
  }

  template <class... E>
  bool dispatch(event_types<E...>, const event_record& r) {
    return (try_apply<E>(r) || ...);
  }

  template <class E>
  bool try_apply(const event_record& r) {
    std::optional<E> e = decode<E>(r);
    if (!e) return false;
    troupe::detail::invoke_apply<Derived>(out_.state, *e);
    return true;
  }

  /// `r` as an `E`, from its own version or, through `E::upcast`, from an
  /// older one in its chain; empty when `r` is none of them.
  template <class E>
  std::optional<E> decode(const event_record& r) {
    if (r.manifest == E::manifest && r.version == version_of<E>()) {
      try {
        return read<E>(r.payload);
      } catch (const std::exception& ex) {
        throw error(errc::corrupt_record,
                    failure(r.seq, r.manifest, "cannot parse version " + std::to_string(r.version) + ": " + ex.what()));
      }
    }
    if constexpr (upcastable<E>) {
      if (auto old = decode<typename E::previous>(r)) return E::upcast(std::move(*old));
    }
    return std::nullopt;
  }

  /// One parser for all events. The values use the default storage, never
  /// a buffer of this function: an event may hold JSON values (a
  /// `boost::json::object` member), which share it.
  template <class E>
  E read(std::string_view text) {
    parser_.reset();
    parser_.write(text);
    return boost::json::value_to<E>(parser_.release());
  }

  journal& journal_;
  const std::string& pid_;
  const persistence_options* options_;
  /// The newest snapshot that could not be used, and why.
  std::optional<std::pair<sequence_nr, std::string>> unreadable_;
  /// A snapshot load that failed without naming a snapshot (the store failed).
  std::error_code load_failed_;
  boost::json::parser parser_{{}, json_text_options()}; // strings read as the bytes written
  recovered<State> out_;
};

} // namespace troupe::persistence::detail
