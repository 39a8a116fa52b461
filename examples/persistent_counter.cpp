// persistent_counter: an event-sourced counter on RocksDB. Run it twice and
// the count goes on; kill it with kill -9 and it still does.
//
//   persistent_counter <directory> [increments]
#include <troupe/troupe.hpp>
#include <troupe/persistence/persistent_actor.hpp>
#include <troupe/rocksdb/store.hpp>

#include <boost/describe/class.hpp>

#include <iostream>
#include <string>

namespace tp = troupe::persistence;

// An event: what happened, with a stable manifest name for the journal.
// Describing its members makes it JSON through Boost.JSON: {"by":1}. (A
// type that needs another shape gets Boost.JSON's `tag_invoke` instead.)
struct incremented {
  static constexpr std::string_view manifest = "counter.incremented";
  long by = 0;
};
BOOST_DESCRIBE_STRUCT(incremented, (), (by))

// The state is JSON too: the actor saves a snapshot of it every 100 events,
// and recovery starts from the latest one.
struct counter_state {
  long value = 0;
};
BOOST_DESCRIBE_STRUCT(counter_state, (), (value))

// Commands.
struct increment {
  long by;
};
struct current {};

class counter : public tp::persistent_actor<counter, counter_state> {
public:
  using events = tp::event_types<incremented>;
  using persistent_actor::persistent_actor;

  // Pure: recovery replays the journal through it.
  static void apply(counter_state& s, const incremented& e) { s.value += e.by; }

  // A command: persist the event (durable, fsync'd), then it is applied.
  troupe::task<long> handle(increment cmd) {
    co_await persist(incremented{cmd.by});
    co_return state().value;
  }
  long handle(current) const { return state().value; }

  void on_recovery_completed() {
    std::cout << "recovered " << pid() << " at " << state().value << " (" << last_sequence_nr()
              << " events, from the snapshot at " << recovered_from_snapshot() << ")\n";
  }
};

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: persistent_counter <directory> [increments]\n";
    return 2;
  }
  const long increments = argc > 2 ? std::stol(argv[2]) : 3;
  troupe::actor_system sys;
  // One store per system, opened once (a second process is refused: the
  // store is locked). Durability: sync, an fsync per group commit.
  auto store = std::make_shared<tp::rocksdb_store>(argv[1]);
  tp::set_journal(sys, std::make_shared<tp::journal_of<tp::rocksdb_store>>(store));

  tp::persistence_options options;
  options.snapshots.every = 100;          // a snapshot every 100 events,
  options.snapshots.keep = 2;             // the last two kept,
  // The events stay: a snapshot only shortens recovery, and one a later
  // release cannot read falls back to them. `delete_events = true` would
  // save their space but make the snapshots the only copy of the state's
  // history, readable by every future release or the actor is lost.
  options.snapshots.delete_events = false;
  auto c = sys.spawn<counter>(troupe::persistence_id{"counter-1"}, options);
  for (long i = 0; i < increments; ++i) {
    long v = c.ask(increment{1}, asio::use_future).get(); // returns once durable
    std::cout << "value " << v << std::endl;
  }
  long final_value = c.ask(current{}, asio::use_future).get();
  std::cout << "final " << final_value << '\n';
}
