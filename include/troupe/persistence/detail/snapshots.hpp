#pragma once

// Saving a snapshot and applying the retention policy, on the journal's
// blocking thread.

#include <troupe/persistence/event.hpp>
#include <troupe/persistence/journal.hpp>
#include <troupe/persistence/json.hpp>
#include <troupe/persistence/options.hpp>
#include <troupe/persistence/records.hpp>
#include <troupe/detail/clock.hpp>

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace troupe::persistence::detail {

/// Serializes `state` here, saves it on the journal's blocking thread, then
/// deletes what the policy no longer keeps. Nobody waits: a snapshot only
/// shortens recoveries, and one that fails to save leaves the journal,
/// which is complete, to do the work. The journal outlives its blocking
/// thread's work (it joins it).
template <class State>
void save_snapshot(journal& j, const std::string& pid, sequence_nr seq, const State& state,
                   const snapshot_policy& policy) {
  snapshot_record s;
  s.seq = seq;
  s.timestamp_ms = troupe::detail::now_ms();
  s.version = state_version_of<State>();
  try {
    s.payload = to_json_text(state);
  } catch (const std::exception&) {
    return;
  }
  j.run_blocking([j = &j, pid, policy, s = std::move(s)] {
    if (j->save_snapshot(pid, s)) return;
    // Before events go, the snapshot that replaces them must be read back
    // from the store and decode: deleted events are never replaced by a
    // snapshot that cannot be read.
    bool readable = false;
    if (policy.delete_events) {
      snapshot_criteria just_saved;
      just_saved.min_seq = just_saved.max_seq = s.seq;
      std::optional<snapshot_record> back;
      if (!j->load_snapshot(pid, just_saved, back) && back && back->payload == s.payload) {
        try {
          readable = back->version == s.version && (void(from_json_text<State>(back->payload)), true);
        } catch (const std::exception&) {
        }
      }
    }
    // The oldest snapshot to keep: walk down `keep` of them.
    snapshot_criteria c;
    std::optional<snapshot_record> found;
    sequence_nr oldest_kept = 0;
    for (std::size_t i = 0; i < policy.keep; ++i) {
      auto ec = j->load_snapshot(pid, c, found);
      if (!found) return; // fewer than `keep`
      if (ec && ec != errc::corrupt_record) return;
      oldest_kept = found->seq;
      if (oldest_kept == 0) return;
      c.max_seq = oldest_kept - 1;
    }
    if (oldest_kept == 0) return;
    // Events first: at every moment, the journal starts right after a
    // snapshot that is still there.
    if (policy.delete_events && readable && j->delete_up_to(pid, oldest_kept)) return;
    snapshot_criteria older;
    older.max_seq = oldest_kept - 1;
    j->delete_snapshots(pid, older);
  });
}

} // namespace troupe::persistence::detail
