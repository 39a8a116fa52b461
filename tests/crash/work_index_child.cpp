// Child of the work-index crash test: eight persistent sender entities
// ("s0".."s7") that passivate after 2 ms idle deliver items to two receivers
// on a store whose WAL syncs are slowed (seeded 15-30 ms), each sender
// waiting for its item to be confirmed, and pausing a seeded moment, before
// the next: a confirmation's clearing of the work mark is often still
// queued when the sender passivates and a new activation records the next
// delivery. In runs whose seed says so, receiver "r1" is missing: its
// deliveries stay unconfirmed (the work the index must keep).
//   run:    resume (the work index alone finds the senders), then deliver
//           until killed; prints "ready" once resumed.
//   finish: both receivers, resume only (nothing else activates a sender),
//           then exit 0 once every delivery is confirmed, or 3 after 30 s.
#include <troupe/troupe.hpp>
#include <troupe/delivery/entities.hpp>
#include <troupe/delivery/reliable_actor.hpp>
#include <troupe/persistence/resume.hpp>
#include <troupe/rocksdb/store.hpp>
#include <troupe/rocksdb/faulty_file_system.hpp>
#include <troupe/testing/faulty_transport.hpp>

#include <asio/use_future.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace td = troupe::delivery;
namespace tp = troupe::persistence;
namespace json = boost::json;
using namespace std::chrono_literals;

struct item {
  static constexpr std::string_view manifest = "wi.item";
  long n = 0;
};
void tag_invoke(json::value_from_tag, json::value& v, const item& e) { v = {{"n", e.n}}; }
item tag_invoke(json::value_to_tag<item>, const json::value& v) { return {json::value_to<long>(v.at("n"))}; }

struct item_sent {
  static constexpr std::string_view manifest = "wi.item-sent";
  long n = 0;
};
void tag_invoke(json::value_from_tag, json::value& v, const item_sent& e) { v = {{"n", e.n}}; }
item_sent tag_invoke(json::value_to_tag<item_sent>, const json::value& v) { return {json::value_to<long>(v.at("n"))}; }

struct item_taken {
  static constexpr std::string_view manifest = "wi.item-taken";
  std::string id;
};
void tag_invoke(json::value_from_tag, json::value& v, const item_taken& e) { v = {{"id", e.id}}; }
item_taken tag_invoke(json::value_to_tag<item_taken>, const json::value& v) {
  return {json::value_to<std::string>(v.at("id"))};
}

constexpr int senders = 8;

/// Most items go to r0; one in eight to r1 (missing in some runs: once a
/// sender delivered to it there, its delivery stays unconfirmed).
std::string receiver_of(const std::string& sender, long n) {
  return std::hash<std::string>{}(sender + ":" + std::to_string(n)) % 8 == 0 ? "r1" : "r0";
}
std::atomic<long> confirmed[senders];

struct send_next {};
struct sender_state {
  long next = 1;
};

class sender : public td::reliable_actor<sender, sender_state> {
public:
  using events = tp::event_types<item_sent>;
  sender(troupe::context<sender> ctx, troupe::persistence_id id, td::delivery_options o)
      : reliable_actor(ctx, std::move(id), o) {}
  static void apply(sender_state& s, const item_sent& e) { s.next = e.n + 1; }

  /// Records and delivers the next item; its number.
  troupe::task<long> handle(send_next) {
    const long n = state().next;
    item msg{n};
    item_sent e{n};
    co_await deliver(receiver_of(pid(), n), td::delivery_id::of(pid(), n), msg, e);
    co_return n;
  }

  void handle(td::confirmed) { ++confirmed[std::stoi(pid().substr(1))]; }
};

struct receiver_state {
  long taken = 0;
};

class receiver : public td::reliable_actor<receiver, receiver_state> {
public:
  using events = tp::event_types<item_taken>;
  using accepts = td::accepts<item>;
  receiver(troupe::context<receiver> ctx, troupe::persistence_id id, td::delivery_options o)
      : reliable_actor(ctx, std::move(id), o) {}
  static void apply(receiver_state& s, const item_taken&) { ++s.taken; }

  troupe::task<> handle(td::delivery<item> d) {
    item_taken e{d.id.str()};
    co_await persist(e);
  }
};

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: work_index_child <dir> <seed> <items> run|finish\n");
    return 2;
  }
  const std::uint64_t seed = std::strtoull(argv[2], nullptr, 10);
  const long items = std::atol(argv[3]);
  const bool finish = std::string(argv[4]) == "finish";
  std::mt19937_64 rng(seed);

  auto fs = std::make_shared<troupe::testing::faulty_file_system>(seed);
  if (!finish) fs->delay_syncs(std::chrono::milliseconds(15 + seed % 16));
  tp::rocksdb_options ro;
  ro.file_system = fs;
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto journal = std::make_shared<tp::journal_of<tp::rocksdb_store>>(std::make_shared<tp::rocksdb_store>(argv[1], ro));
  tp::set_journal(sys, journal);
  // Acknowledgements come late (a stale copy that a new activation sends
  // again is answered after that activation recorded its next delivery).
  auto net = std::make_shared<troupe::testing::faulty_transport>(std::make_shared<td::local_transport>(),
                                                                 sys.get_executor(), seed);
  if (!finish) net->set_ack_faults({.delay = 0.7, .max_delay = 20ms});
  td::set_transport(sys, net);
  td::delivery_options o;
  o.redelivery.initial_backoff = 20ms;
  o.redelivery.max_backoff = 100ms;
  o.redelivery.max_attempts = 0; // without end
  o.dedup.retention = std::chrono::milliseconds::max();
  auto region = td::entities<sender>(sys, "s", o, troupe::entity_options{.idle_timeout = 2ms}, o);
  sys.spawn<receiver>(troupe::persistence_id{"r0"}, o);
  const bool r1_present = finish || seed % 3 != 0;
  if (r1_present) sys.spawn<receiver>(troupe::persistence_id{"r1"}, o);
  tp::resume(*journal, region, "s", asio::use_future).get();
  std::printf("ready\n");
  std::fflush(stdout);

  if (finish) {
    // Only what resume activated may finish the work: every delivery confirmed.
    const auto deliveries = journal->open_table("deliveries");
    for (auto end = std::chrono::steady_clock::now() + 30s; std::chrono::steady_clock::now() < end;) {
      std::size_t left = 0;
      if (!journal->scan(deliveries, {}, [&](std::string_view, std::string_view) { return ++left, true; }) &&
          left == 0)
        return 0;
      std::this_thread::sleep_for(20ms);
    }
    return 3;
  }
  // One driver thread per sender.
  std::vector<std::thread> drivers;
  for (int i = 0; i < senders; ++i)
    drivers.emplace_back([&, i, local = std::mt19937_64(seed + i)]() mutable {
      for (;;) {
        const long before = confirmed[i];
        const long n = region.get("s" + std::to_string(i)).ask(send_next{}, asio::use_future).get();
        if (n > items) return;
        // A missing r1 never confirms: this sender's work stays open (and
        // must stay in the index) for the rest of the run.
        if (!r1_present && receiver_of("s" + std::to_string(i), n) == "r1") return;
        while (confirmed[i] == before) std::this_thread::sleep_for(1ms);
        std::this_thread::sleep_for(std::chrono::milliseconds(local() % 5)); // passivation comes meanwhile
      }
    });
  for (auto& d : drivers) d.join();
  return 0;
}
