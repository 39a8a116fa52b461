// cookbook/price_cache: a cache in front of a slow supplier. It waits for
// its supplier with a selective receive before it serves anyone; an ask for
// a price it does not have is set aside with its reply promise (stash) and
// answered once the one fetch for that item has come back, so a hundred
// askers of five items cost the supplier five fetches.
//
//   cookbook_price_cache
#include <troupe/troupe.hpp>

#include <asio/steady_timer.hpp>

#include <cstdio>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace std::chrono_literals;

// -- the supplier: slow, and counts what it is asked --------------------------

struct fetch {
  std::string item;
  using reply_type = long;
};
struct fetches {};

class supplier {
public:
  troupe::task<long> handle(fetch f) {
    asio::steady_timer t(co_await asio::this_coro::executor, 20ms); // a slow call elsewhere
    co_await t.async_wait(asio::use_awaitable);
    ++fetched_;
    co_return static_cast<long>(f.item.size()) * 100;
  }
  int handle(fetches) const { return fetched_; }

private:
  int fetched_ = 0;
};

// -- the cache ----------------------------------------------------------------

struct price_of {
  std::string item;
  using reply_type = long;
};
/// Told once, when the supplier is known.
struct open_shop {
  troupe::actor_ref<supplier> from;
};

class cache {
public:
  /// Taken only by `receive`, never by a handler.
  using receives = troupe::messages<open_shop>;

  explicit cache(troupe::context<cache> ctx) : ctx_(ctx) {}

  /// Nothing is served before the supplier is known: asks queue meanwhile
  /// (they go to the handlers, after this).
  troupe::task<void> on_start() {
    auto open = co_await ctx_.receive<open_shop>(5s); // or errc::receive_timeout, and the supervisor decides
    supplier_ = open.from;
  }

  /// Answered at once from the cache; else the ask is stashed with its
  /// promise and handled again when its price is in.
  void handle(price_of q, troupe::reply_promise<long> p) {
    if (auto it = prices_.find(q.item); it != prices_.end()) return p.deliver(it->second);
    if (auto it = failed_.find(q.item); it != failed_.end()) return p.fail(troupe::errc::handler_failed, it->second);
    if (loading_.insert(q.item).second) {
      // The continuation runs as a turn of this actor: it may touch its members.
      ctx_.ask(*supplier_, fetch{q.item})
          .then(
              [this, item = q.item](long price) {
                prices_[item] = price;
                loading_.erase(item);
                ctx_.unstash_all(); // the waiting asks, in the order they came, before anything queued
              },
              [this, item = q.item](const troupe::error& e) {
                failed_[item] = e.what();
                loading_.erase(item);
                ctx_.unstash_all();
              });
    }
    ctx_.stash(std::move(q), std::move(p));
  }

private:
  troupe::context<cache> ctx_;
  std::optional<troupe::actor_ref<supplier>> supplier_;
  std::map<std::string, long> prices_;
  std::map<std::string, std::string> failed_;
  std::set<std::string> loading_;
};

int main() {
  // Every ask without a timeout of its own fails after 2 s (by default an
  // ask waits as long as it takes: troupe::no_timeout).
  troupe::actor_system sys(troupe::system_config{.ask_timeout = 2s});
  auto s = sys.spawn<supplier>();
  auto c = sys.spawn<cache>();

  const std::vector<std::string> items{"pear", "apple", "fig", "melon", "kiwi"};
  std::vector<std::future<long>> answers;
  for (int i = 0; i < 100; ++i) answers.push_back(c.ask(price_of{items[i % items.size()]}, asio::use_future));
  c.tell(open_shop{s}); // only now can the cache serve them

  bool ok = true;
  for (int i = 0; i < 100; ++i)
    ok = ok && answers[i].get() == static_cast<long>(items[i % items.size()].size()) * 100;
  const int fetched = s.ask(fetches{}, asio::use_future).get();
  std::printf("100 asks answered %s; the supplier was asked %d times for %zu items\n", ok ? "correctly" : "WRONGLY",
              fetched, items.size());
  return ok && fetched == static_cast<int>(items.size()) ? 0 : 1;
}
