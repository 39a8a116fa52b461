// The PostgreSQL store against a network and a server that fail: a proxy
// (troupe::testing::tcp_proxy) between the store and the server loses a
// commit's answer or its request, refuses connections, holds every byte;
// and a server of the test's own goes down and comes back. The store never
// acknowledges what did not commit, never half-applies a write, and writes
// again once the server answers, without being opened again.
#include "support.hpp"

#include "../support.hpp"

#include <troupe/detail/clock.hpp>
#include <troupe/testing/tcp_proxy.hpp>
// The engine's connection (libpq), which these reach into.
#include <troupe/postgres/detail/connection.hpp>

#include <catch2/catch.hpp>

#include <asio/ip/tcp.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace postgres_network_faults_test {

using namespace std::chrono_literals;
namespace tp = troupe::persistence;
namespace tt = troupe::testing;

namespace {

std::vector<tp::event_record> events(tp::sequence_nr first, tp::sequence_nr last) {
  std::vector<tp::event_record> out;
  for (auto s = first; s <= last; ++s) out.push_back({s, "m", 1, "{\"n\":" + std::to_string(s) + "}"});
  return out;
}

/// The ID's events, checked to run 1, 2, 3, ... without a gap.
std::size_t contiguous(tp::postgres_store& s, const std::string& pid) {
  std::vector<tp::sequence_nr> seen;
  const auto ec = s.replay(pid, 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& e) { seen.push_back(e.seq); });
  INFO(s.last_failure());
  REQUIRE(!ec);
  for (std::size_t i = 0; i < seen.size(); ++i) REQUIRE(seen[i] == i + 1);
  return seen.size();
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

} // namespace

TEST_CASE("a commit whose answer the network loses is resolved with the server, not sent again: acknowledged, once") {
  test::pg::schema db;
  tt::tcp_proxy proxy("127.0.0.1", test::pg::server_port());
  tp::postgres_store s(db.options_via(proxy.port()));
  auto t = s.open_table("t");
  REQUIRE(!s.write("p", events(1, 2)));
  proxy.lose_answer_to("COMMIT");
  const auto ec = s.write("p", events(3, 5), {tp::table_write::put(t, "k", "v")});
  INFO(ec.message() << ": " << s.last_failure());
  CHECK(!ec); // the server committed it: the write is acknowledged
  CHECK(proxy.cuts() == 1);
  CHECK(s.counts().resolved == 1);
  CHECK(contiguous(s, "p") == 5); // once: no second copy, no refused retry
  std::optional<std::string> v;
  REQUIRE(!s.get(t, "k", v));
  CHECK(v == "v");
  // The store goes on over a new connection.
  CHECK(!s.write("p", events(6, 6)));
  CHECK(contiguous(s, "p") == 6);
}

TEST_CASE("a commit the network loses on its way is resolved as not committed: the write fails, nothing of it stays") {
  test::pg::schema db;
  tt::tcp_proxy proxy("127.0.0.1", test::pg::server_port());
  tp::postgres_store s(db.options_via(proxy.port()));
  auto t = s.open_table("t");
  REQUIRE(!s.write("p", events(1, 2)));
  proxy.lose_request("COMMIT");
  const auto ec = s.write("p", events(3, 5), {tp::table_write::put(t, "k", "v")});
  CHECK(ec == tp::errc::storage_failure);
  CHECK(proxy.cuts() == 1);
  CHECK(s.counts().resolved == 1); // asked, and the server said: aborted
  CHECK(contiguous(s, "p") == 2);
  std::optional<std::string> v;
  REQUIRE(!s.get(t, "k", v));
  CHECK_FALSE(v);
  // The same numbers are free, and taken now.
  CHECK(!s.write("p", events(3, 3)));
  CHECK(contiguous(s, "p") == 3);
}

// A connection lost between two statements of a transaction takes the
// transaction with it (the server rolls it back). The store must not go on
// with the transaction's next statements on a new connection: outside any
// transaction they would each commit alone, and COMMIT there succeeds
// without committing anything.
TEST_CASE("a connection lost after a group's statements, before its COMMIT: the write fails, nothing of it stays") {
  test::pg::schema db;
  tt::tcp_proxy proxy("127.0.0.1", test::pg::server_port());
  tp::postgres_store s(db.options_via(proxy.port()));
  auto t = s.open_table("t");
  const std::string pid = "p-between-statements";
  REQUIRE(!s.write(pid, events(1, 1)));
  for (int round = 0; round < 5; ++round) {
    // The pipeline names the ID: its answers come back, then the cut.
    proxy.cut_after_answer_to(pid);
    const auto key = "k" + std::to_string(round);
    const auto ec = s.write(pid, events(2, 4), {tp::table_write::put(t, key, "v")});
    INFO("round " << round << ": " << ec.message() << ": " << s.last_failure());
    CHECK(ec == tp::errc::storage_failure);
    CHECK(contiguous(s, pid) == 1);
    std::optional<std::string> v;
    REQUIRE(!s.get(t, key, v));
    CHECK_FALSE(v);
  }
  // The numbers are still free, and the store writes them now.
  CHECK(!s.write(pid, events(2, 2)));
  CHECK(contiguous(s, pid) == 2);
}

TEST_CASE("a connection lost inside drop_expired's transaction: nothing of it is applied, the floor included") {
  test::pg::schema db;
  tt::tcp_proxy proxy("127.0.0.1", test::pg::server_port());
  tp::postgres_store s(db.options_via(proxy.port()));
  auto t = s.open_table("expiring");
  s.set_expiry(t, [](std::string_view, std::string_view) -> std::optional<std::int64_t> { return 1; });
  REQUIRE(!s.write("", {}, {tp::table_write::put(t, "a", "1"), tp::table_write::put(t, "b", "2")}));
  const auto floor = s.expired_through();
  // BEGIN is answered, then the connection is cut; and the first DELETE
  // sent after would be lost on its way.
  proxy.cut_after_answer_to("BEGIN");
  proxy.lose_request("DELETE");
  const auto ec = s.drop_expired(t);
  INFO(ec.message() << ": " << s.last_failure());
  CHECK(ec == tp::errc::storage_failure);
  std::optional<std::string> a, b;
  REQUIRE(!s.get(t, "a", a));
  REQUIRE(!s.get(t, "b", b));
  CHECK(a == "1");
  CHECK(b == "2");
  CHECK(s.expired_through() == floor);
  {
    tp::postgres_store again(db.options());
    CHECK(again.expired_through() == floor); // nor the stored floor
  }
  // And once the network is fine, both go, with the floor.
  proxy.lose_request("\x01never\x02"); // (disarms the DELETE's loss)
  REQUIRE(!s.drop_expired(t));
  REQUIRE(!s.get(t, "a", a));
  CHECK_FALSE(a);
  CHECK(s.expired_through() > floor);
}

// Writers in parallel (their writes grouped into shared transactions)
// while the network between the store and the server is cut, partitioned
// and refuses connections at seeded random moments. Each write puts its
// last sequence number in a table with its events: after the storm, every
// acknowledged write is stored, each ID's events run 1..n without a gap,
// its highest is n, and its table value is n (all of each write or none).
TEST_CASE("under a seeded storm of cuts, partitions and refusals, every acknowledged write is stored whole, and "
          "nothing else") {
  const auto seed = std::random_device{}();
  INFO("seed " << seed << " (the storm's moments; the server's timing is not seeded)");
  test::pg::schema db;
  {
    tp::postgres_store direct(db.options());
    (void)direct.open_table("last");
  }
  tt::tcp_proxy proxy("127.0.0.1", test::pg::server_port());
  auto o = db.options_via(proxy.port());
  o.io_timeout = 200ms;
  o.resolve_for = 5s;
  o.reconnect_backoff = 5ms;
  o.max_reconnect_backoff = 50ms;
  tp::postgres_store s(o);
  const auto t = s.open_table("last");
  constexpr int writers = 8;
  std::atomic<bool> stop{false};
  std::atomic<long> acknowledged{0}, failed{0}, mismatches{0}, unanswered{0};
  std::vector<tp::sequence_nr> top(writers, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w)
    threads.emplace_back([&, w] {
      std::mt19937 rng(seed + w);
      const std::string pid = "storm-" + std::to_string(w);
      tp::sequence_nr next = 1;
      while (!stop) {
        const auto last = next + rng() % 4;
        const auto ec = s.write(pid, events(next, last), {tp::table_write::put(t, pid, std::to_string(last))});
        if (!ec) {
          ++acknowledged;
          top[w] = last;
          next = last + 1;
          continue;
        }
        ++failed;
        mismatches += ec == tp::errc::sequence_mismatch;
        // Failed, or committed without an answer: the server says which.
        const bool asked = test::eventually(
            [&] {
              try {
                next = s.highest_sequence_nr(pid) + 1;
                return true;
              } catch (const std::exception&) {
                return false;
              }
            },
            30s);
        if (!asked) {
          ++unanswered;
          return;
        }
      }
    });
  std::mt19937 rng(seed);
  const auto end = std::chrono::steady_clock::now() + 4s;
  while (std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 30'000));
    const auto what = rng() % 10;
    if (what < 7) {
      proxy.cut();
    } else if (what < 9) {
      proxy.partition(true);
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 400));
      proxy.partition(false);
    } else {
      proxy.refuse(true);
      proxy.cut();
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 100));
      proxy.refuse(false);
    }
  }
  stop = true;
  for (auto& th : threads) th.join();
  INFO(acknowledged << " writes acknowledged, " << failed << " failed; " << proxy.cuts() << " cuts");
  CHECK(acknowledged > 0);
  CHECK(failed > 0); // (the storm reached the writes)
  CHECK(mismatches == 0); // a writer that asked the server never collides
  CHECK(unanswered == 0); // (the server answers again once the storm ends)
  tp::postgres_store direct(db.options());
  const auto last = direct.open_table("last");
  for (int w = 0; w < writers; ++w) {
    const std::string pid = "storm-" + std::to_string(w);
    INFO(pid << ", acknowledged through " << top[w]);
    const auto n = contiguous(direct, pid);
    CHECK(n >= top[w]);
    CHECK(direct.highest_sequence_nr(pid) == n);
    std::optional<std::string> v;
    REQUIRE(!direct.get(last, pid, v));
    if (n == 0) {
      CHECK_FALSE(v);
    } else {
      CHECK(v == std::to_string(n));
    }
  }
}

// A statement larger than what the sockets' buffers hold is sent in
// pieces, each waiting for the server to read: that wait too is bounded.
TEST_CASE("a write larger than the sockets' buffers to a server that stops reading fails within its time limit") {
  test::pg::schema db;
  tt::tcp_proxy proxy("127.0.0.1", test::pg::server_port());
  auto o = db.options_via(proxy.port());
  o.io_timeout = 1000ms;
  o.resolve_for = 1s;
  tp::postgres_store s(o);
  REQUIRE(!s.write("p", events(1, 1)));
  const std::string big(8u << 20, 'z');
  proxy.partition_after(std::string(64, 'z')); // once the payload is on its way
  std::promise<void> done;
  std::thread heal([&, ended = done.get_future()] {
    (void)ended.wait_for(15s); // (the code before waited until this heal)
    proxy.partition(false);
  });
  const auto start = std::chrono::steady_clock::now();
  const auto ec = s.write("p", {{2, "m", 1, big}});
  const auto took = std::chrono::steady_clock::now() - start;
  done.set_value();
  heal.join();
  INFO(ec.message() << ": " << s.last_failure());
  CHECK(ec == tp::errc::storage_failure);
  // io_timeout, then the commit's outcome asked for up to resolve_for.
  CHECK(took < 8s);
  CHECK(contains(s.last_failure(), "no answer from the PostgreSQL server within 1000 ms"));
  // The network is fine again: the same store writes.
  CHECK(test::eventually([&] { return !s.write("p", events(2, 2)); }, 10s));
  CHECK(contiguous(s, "p") == 2);
}

TEST_CASE("drop_expired whose COMMIT's answer is lost: what it may have dropped is under the store's expiry floor") {
  test::pg::schema db;
  tt::tcp_proxy proxy("127.0.0.1", test::pg::server_port());
  tp::postgres_store s(db.options_via(proxy.port()));
  auto t = s.open_table("expiring");
  s.set_expiry(t, [](std::string_view, std::string_view v) -> std::optional<std::int64_t> { return std::stoll(std::string(v)); });
  const auto expiry = troupe::detail::now_ms() - 1000;
  REQUIRE(!s.write("", {}, {tp::table_write::put(t, "m", std::to_string(expiry))}));
  proxy.lose_answer_to("COMMIT");
  (void)s.drop_expired(t); // failed, or not: the server committed it
  std::optional<std::string> v;
  REQUIRE(test::eventually([&] { return !s.get(t, "m", v); }, 5s));
  INFO("floor " << s.expired_through() << ", expiry " << expiry);
  CHECK_FALSE(v); // dropped...
  CHECK(s.expired_through() >= expiry); // ...and so under the floor the store reports
}

TEST_CASE("a server that is down: writes fail naming why, attempts to connect back off, and writes resume when it is up") {
  test::pg::schema db;
  tt::tcp_proxy proxy("127.0.0.1", test::pg::server_port());
  auto o = db.options_via(proxy.port());
  o.reconnect_backoff = 100ms;
  o.max_reconnect_backoff = 400ms;
  tp::postgres_store s(o);
  REQUIRE(!s.write("p", events(1, 1)));
  proxy.refuse(true);
  proxy.cut();
  const auto before = proxy.accepted();
  const auto start = std::chrono::steady_clock::now();
  int failed = 0;
  while (std::chrono::steady_clock::now() - start < 600ms) {
    const auto ec = s.write("p", events(2, 2));
    INFO(s.last_failure());
    CHECK(ec == tp::errc::storage_failure);
    // (The server's answer to the attempt to connect; while backing off,
    // also when the next attempt is due.)
    CHECK(contains(s.last_failure(), "connecting to PostgreSQL: "));
    CHECK(contains(s.last_failure(), "server closed the connection"));
    failed += ec == tp::errc::storage_failure;
    std::this_thread::sleep_for(5ms);
  }
  const auto attempts = proxy.accepted() - before;
  INFO(failed << " writes failed, " << attempts << " attempts to connect");
  CHECK(failed >= 20);
  // 0, 100, 300 (then every 400) ms: a handful, not one per write.
  CHECK(attempts >= 2);
  CHECK(attempts <= 5);
  // Up again: the same store writes, with nothing reopened.
  proxy.refuse(false);
  std::error_code ec = tp::errc::storage_failure;
  CHECK(test::eventually([&] { return !(ec = s.write("p", events(2, 2))); }, 5s));
  CHECK(contiguous(s, "p") == 2);
}

TEST_CASE("a server that stops answering before a commit: the write fails within its time limit, nothing of it stays") {
  test::pg::schema db;
  tt::tcp_proxy proxy("127.0.0.1", test::pg::server_port());
  auto o = db.options_via(proxy.port());
  o.io_timeout = 300ms;
  tp::postgres_store s(o);
  REQUIRE(!s.write("p", events(1, 1)));
  proxy.partition(true);
  const auto start = std::chrono::steady_clock::now();
  const auto ec = s.write("p", events(2, 4));
  const auto took = std::chrono::steady_clock::now() - start;
  INFO(s.last_failure());
  CHECK(ec == tp::errc::storage_failure);
  CHECK(contains(s.last_failure(), "no answer from the PostgreSQL server within 300 ms"));
  CHECK(took < 2s); // (it waited for BEGIN's answer, 300 ms; no COMMIT was sent)
  proxy.partition(false);
  CHECK(test::eventually([&] { return !s.write("p", events(2, 4)); }, 10s));
  CHECK(contiguous(s, "p") == 4);
}

TEST_CASE("a server that stops answering after a commit was sent: its outcome is unknown, never guessed; all or none") {
  test::pg::schema db;
  tt::tcp_proxy proxy("127.0.0.1", test::pg::server_port());
  auto o = db.options_via(proxy.port());
  o.io_timeout = 300ms;
  o.resolve_for = 500ms;
  tp::postgres_store s(o);
  REQUIRE(!s.write("p", events(1, 1)));
  proxy.partition_after("COMMIT");
  const auto start = std::chrono::steady_clock::now();
  const auto ec = s.write("p", events(2, 4));
  const auto took = std::chrono::steady_clock::now() - start;
  INFO(s.last_failure());
  CHECK(ec == tp::errc::storage_failure);
  // Its answer is awaited 300 ms; its outcome asked for, over a connection
  // that cannot open before libpq's own connect timeout (2 s): never forever.
  CHECK(took < 10s);
  CHECK(contains(s.last_failure(), "unknown"));
  CHECK(s.counts().resolved == 0);
  proxy.partition(false);
  // Healed: the server had the COMMIT. The events are all there or none,
  // and the store goes on from there.
  tp::sequence_nr highest = 0;
  CHECK(test::eventually(
      [&] {
        try {
          highest = s.highest_sequence_nr("p");
          return true;
        } catch (const troupe::error&) {
          return false;
        }
      },
      10s));
  CHECK((highest == 1 || highest == 4));
  CHECK(test::eventually([&] { return !s.write("p", events(highest + 1, highest + 1)); }, 10s));
  CHECK(contiguous(s, "p") == highest + 1);
}

// A server of the test's own, stopped (its sessions terminated, then no
// server at all) and started again with its data.
TEST_CASE("a server that is stopped and started again: writes fail meanwhile, then succeed on the same store") {
  asio::io_context io;
  asio::ip::tcp::acceptor probe(io, {asio::ip::address_v4::loopback(), 0});
  const auto port = probe.local_endpoint().port();
  probe.close();
  const std::string dir = "/tmp/troupe-postgres-restart-" + std::to_string(::getpid());
  const std::string script = TROUPE_TEST_POSTGRES_SERVER_SCRIPT;
  REQUIRE(std::system(("sh " + script + " start " + dir + " " + std::to_string(port) + " >/dev/null").c_str()) == 0);
  struct stop_at_end {
    std::string cmd;
    ~stop_at_end() { (void)std::system(cmd.c_str()); }
  } stop{"sh " + script + " stop " + dir + "; rm -rf " + dir};
  tp::postgres_options o;
  o.conninfo = "postgresql://troupe@127.0.0.1:" + std::to_string(port) + "/postgres";
  o.reconnect_backoff = 50ms;
  o.max_reconnect_backoff = 200ms;
  tp::postgres_store s(o);
  REQUIRE(!s.write("p", events(1, 3)));
  REQUIRE(std::system(("sh " + script + " halt " + dir).c_str()) == 0);
  for (int i = 0; i < 3; ++i) {
    CHECK(s.write("p", events(4, 4)) == tp::errc::storage_failure);
    INFO(s.last_failure());
    // (The session's end, as the server said it, or the failed connect.)
    CHECK(contains(s.last_failure(), "connection"));
  }
  REQUIRE(std::system(("sh " + script + " resume " + dir).c_str()) == 0);
  CHECK(test::eventually([&] { return !s.write("p", events(4, 4)); }, 10s));
  CHECK(contiguous(s, "p") == 4);
}

} // namespace postgres_network_faults_test
