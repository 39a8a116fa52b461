// Child of the persistence crash test: persistent actors append events in
// sync mode to the store in argv[1]; after each acknowledged persist it
// writes "<pid> <seq>\n" to stdout (unbuffered). Runs until killed. Odd
// actors snapshot every 7 events, keep 2 and delete the events covered.
#include <troupe/troupe.hpp>
#include <troupe/persistence/persistent_actor.hpp>
#include <troupe/rocksdb/store.hpp>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/use_future.hpp>

#include <cstdio>
#include <string>
#include <unistd.h>

namespace tp = troupe::persistence;
namespace json = boost::json;

struct ticked {
  static constexpr std::string_view manifest = "crash.ticked";
  long n = 0;
};
void tag_invoke(json::value_from_tag, json::value& v, const ticked& e) { v = {{"n", e.n}}; }
ticked tag_invoke(json::value_to_tag<ticked>, const json::value& v) { return {json::value_to<long>(v.at("n"))}; }

struct tick_state {
  long last = 0;
};
void tag_invoke(json::value_from_tag, json::value& v, const tick_state& s) { v = {{"last", s.last}}; }
tick_state tag_invoke(json::value_to_tag<tick_state>, const json::value& v) {
  return {json::value_to<long>(v.at("last"))};
}
struct tick {};

class ticker : public tp::persistent_actor<ticker, tick_state> {
public:
  using events = tp::event_types<ticked>;
  using persistent_actor::persistent_actor;
  static void apply(tick_state& s, const ticked& e) { s.last = e.n; }
  troupe::task<tp::sequence_nr> handle(tick) {
    ticked e{state().last + 1};
    co_await persist(e);
    co_return last_sequence_nr();
  }
};

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  tp::set_journal(sys,
                  std::make_shared<tp::journal_of<tp::rocksdb_store>>(std::make_shared<tp::rocksdb_store>(argv[1])));
  tp::persistence_options snapshotting;
  snapshotting.snapshots.every = 7;
  snapshotting.snapshots.keep = 2;
  snapshotting.snapshots.delete_events = true;
  const int actors = std::stoi(argv[2]);
  std::vector<std::future<void>> loops;
  for (int a = 0; a < actors; ++a) {
    std::string pid = "crash-" + std::to_string(a);
    auto t = sys.spawn<ticker>(tp::persistence_id{pid}, a % 2 ? snapshotting : tp::persistence_options{});
    loops.push_back(asio::co_spawn(
        sys.get_executor(),
        [t, pid]() -> asio::awaitable<void> {
          for (;;) {
            auto seq = co_await t.ask(tick{});
            auto line = pid + " " + std::to_string(seq) + "\n";
            if (::write(1, line.data(), line.size()) < 0) co_return;
          }
        },
        asio::use_future));
  }
  for (auto& l : loops) l.get();
}
