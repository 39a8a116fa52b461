// Child of the delivery crash test: four persistent senders each deliver
// items 1..N (delivery IDs "s<i>:<n>") to two persistent receivers through a
// transport that drops, duplicates, reorders and delays (seeded), on the
// store in argv[1] (sync mode). Each receiver journals one event per
// delivery it processes. With "finish" it exits 0 once every delivery is
// confirmed; otherwise it runs until killed. Prints "ready" once recovered.
#include <troupe/troupe.hpp>
#include <troupe/testing/faulty_transport.hpp>
#include <troupe/delivery/reliable_actor.hpp>
#include <troupe/rocksdb/store.hpp>

#include <asio/use_future.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

namespace td = troupe::delivery;
namespace tp = troupe::persistence;
namespace json = boost::json;

struct item {
  static constexpr std::string_view manifest = "crash.item";
  long n = 0;
};
void tag_invoke(json::value_from_tag, json::value& v, const item& e) { v = {{"n", e.n}}; }
item tag_invoke(json::value_to_tag<item>, const json::value& v) { return {json::value_to<long>(v.at("n"))}; }

struct item_sent {
  static constexpr std::string_view manifest = "crash.item-sent";
  long n = 0;
};
void tag_invoke(json::value_from_tag, json::value& v, const item_sent& e) { v = {{"n", e.n}}; }
item_sent tag_invoke(json::value_to_tag<item_sent>, const json::value& v) { return {json::value_to<long>(v.at("n"))}; }

struct item_taken {
  static constexpr std::string_view manifest = "crash.item-taken";
  std::string id;
};
void tag_invoke(json::value_from_tag, json::value& v, const item_taken& e) { v = {{"id", e.id}}; }
item_taken tag_invoke(json::value_to_tag<item_taken>, const json::value& v) {
  return {json::value_to<std::string>(v.at("id"))};
}

struct send_item {
  long n;
};
struct progress {};

// Senders notify the main thread of progress (a confirmation).
std::mutex progress_mutex;
std::condition_variable progress_made;

struct sender_state {
  std::set<long> sent;
};

class sender : public td::reliable_actor<sender, sender_state> {
public:
  using events = tp::event_types<item_sent>;
  sender(troupe::context<sender> ctx, troupe::persistence_id id, std::string to, td::delivery_options o)
      : reliable_actor(ctx, std::move(id), o), to_(std::move(to)) {}
  static void apply(sender_state& s, const item_sent& e) { s.sent.insert(e.n); }

  troupe::task<> handle(send_item m) {
    if (state().sent.contains(m.n)) co_return; // recorded before a crash
    auto id = td::delivery_id::of(pid(), m.n);
    item msg{m.n};
    item_sent e{m.n};
    co_await deliver(to_, id, msg, e);
  }

  long handle(progress) { return static_cast<long>(state().sent.size()); }

  void handle(td::confirmed) {
    { std::lock_guard g(progress_mutex); }
    progress_made.notify_all();
  }

private:
  std::string to_;
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
  if (argc < 4) {
    std::fprintf(stderr, "usage: delivery_child <dir> <seed> <items> [finish]\n");
    return 2;
  }
  const std::uint64_t seed = std::strtoull(argv[2], nullptr, 10);
  const long items = std::atol(argv[3]);
  const bool finish = argc > 4 && std::string(argv[4]) == "finish";

  troupe::actor_system sys(troupe::system_config{.threads = 2});
  tp::set_journal(sys,
                  std::make_shared<tp::journal_of<tp::rocksdb_store>>(std::make_shared<tp::rocksdb_store>(argv[1])));
  auto net = std::make_shared<troupe::testing::faulty_transport>(std::make_shared<td::local_transport>(),
                                                                 sys.get_executor(), seed);
  troupe::testing::fault_rates faults{
      .drop = 0.1, .duplicate = 0.1, .reorder = 0.1, .delay = 0.05, .max_delay = std::chrono::milliseconds(20)};
  net->set_message_faults(faults);
  net->set_ack_faults(faults);
  td::set_transport(sys, net);

  td::delivery_options o;
  o.redelivery.initial_backoff = std::chrono::milliseconds(20);
  o.redelivery.max_backoff = std::chrono::milliseconds(100);
  o.redelivery.max_attempts = 0;
  // Senders wait for room (backpressure) rather than pile up thousands of
  // deliveries the receivers have not reached, all being redelivered.
  o.redelivery.max_unconfirmed = 200;
  o.redelivery.wait_when_full = true;
  o.redelivery.burst = 100;
  o.dedup.retention = std::chrono::milliseconds::max();

  std::vector<troupe::actor_ref<receiver>> receivers;
  for (int r = 0; r < 2; ++r)
    receivers.push_back(sys.spawn<receiver>(troupe::persistence_id{"r" + std::to_string(r)}, o));
  std::vector<troupe::actor_ref<sender>> senders;
  for (int s = 0; s < 4; ++s)
    senders.push_back(
        sys.spawn<sender>(troupe::persistence_id{"s" + std::to_string(s)}, "r" + std::to_string(s % 2), o));
  // Recovered (their first message waits for recovery): tell the parent.
  for (auto& s : senders) s.ask(td::delivery_status{}, asio::use_future).get();
  for (auto& r : receivers) r.ask(td::delivery_status{}, asio::use_future).get();
  if (!finish) {
    std::printf("ready\n");
    std::fflush(stdout);
  }
  for (long n = 1; n <= items; ++n)
    for (auto& s : senders) (void)s.tell(send_item{n});

  for (;;) {
    {
      // Checked again after confirmations, at least every 200 ms.
      std::unique_lock l(progress_mutex);
      progress_made.wait_for(l, std::chrono::milliseconds(200));
    }
    bool done = true;
    for (auto& s : senders) {
      if (s.ask(progress{}, asio::use_future).get() != items) done = false;
      if (s.ask(td::delivery_status{}, asio::use_future).get().unconfirmed != 0) done = false;
    }
    if (done && finish) return 0;
  }
}
