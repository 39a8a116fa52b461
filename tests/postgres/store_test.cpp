// The PostgreSQL store's own promises: one writer per persistence ID
// (claims and fencing, also across OS processes), group commit, and errors
// that name what went wrong.
#include "support.hpp"

#include "../support.hpp"

#include <troupe/persistence/journal.hpp>
// The engine's connection (libpq), which these reach into.
#include <troupe/postgres/detail/connection.hpp>

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace postgres_store_test {

namespace tp = troupe::persistence;

namespace {

std::vector<tp::event_record> events(tp::sequence_nr first, tp::sequence_nr last, const std::string& payload = "{}") {
  std::vector<tp::event_record> out;
  for (auto s = first; s <= last; ++s) out.push_back({s, "m", 1, payload});
  return out;
}

std::vector<tp::event_record> replay(tp::postgres_store& s, const std::string& pid) {
  std::vector<tp::event_record> out;
  REQUIRE(!s.replay(pid, 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& e) { out.push_back(e); }));
  return out;
}

} // namespace

TEST_CASE("a store whose claim a newer store took is fenced: nothing of its writes commits") {
  test::pg::schema db;
  tp::postgres_store a(db.options()), b(db.options());
  auto t = a.open_table("marks");
  REQUIRE(!a.write("p", events(1, 2)));
  CHECK(a.epoch("p") == 1); // its first events claimed it
  REQUIRE(!b.claim("p"));
  CHECK(b.epoch("p") == 2);
  // The older claimant: neither events nor table changes for the ID.
  CHECK(a.write("p", events(3, 3)) == tp::errc::fenced);
  CHECK(a.write("p", {}, {tp::table_write::put(t, "k", "a")}) == tp::errc::fenced);
  std::optional<std::string> v;
  REQUIRE(!a.get(t, "k", v));
  CHECK_FALSE(v);
  // Writes for no ID are nobody's.
  CHECK(!a.write("", {}, {tp::table_write::put(t, "free", "a")}));
  // The newer one continues where the events end.
  CHECK(b.highest_sequence_nr("p") == 2);
  REQUIRE(!b.write("p", events(3, 3)));
  CHECK(replay(b, "p").size() == 3);
  // Claiming back: the roles swap.
  REQUIRE(!a.claim("p"));
  CHECK(b.write("p", events(4, 4)) == tp::errc::fenced);
  CHECK(!a.write("p", events(4, 4)));
}

TEST_CASE("a store's first events of an ID claim it, if they continue its numbers, and fence the store before") {
  test::pg::schema db;
  tp::postgres_store a(db.options()), b(db.options());
  REQUIRE(!a.write("p", events(1, 2)));
  // A gap or a reuse claims nothing.
  CHECK(b.write("p", events(4, 4)) == tp::errc::sequence_mismatch);
  CHECK(b.write("p", events(2, 2)) == tp::errc::sequence_mismatch);
  CHECK(b.epoch("p") == 0);
  CHECK(!a.write("p", events(3, 3))); // still a's
  REQUIRE(!b.write("p", events(4, 5)));
  CHECK(b.epoch("p") == 2);
  CHECK(a.write("p", events(6, 6)) == tp::errc::fenced);
  const auto all = replay(a, "p");
  REQUIRE(all.size() == 5);
  for (std::size_t i = 0; i < all.size(); ++i) CHECK(all[i].seq == i + 1);
}

TEST_CASE("writes queued while a commit is under way go into the next commit, each atomic on its own") {
  test::pg::schema db;
  tp::postgres_store s(db.options());
  auto t = s.open_table("t");
  constexpr int n = 400;
  std::vector<std::promise<std::error_code>> done(n);
  for (int i = 0; i < n; ++i) {
    // Every tenth write is wrong (its number skips one): it alone fails.
    const tp::sequence_nr first = i % 10 == 9 ? 2 : 1;
    s.submit("p-" + std::to_string(i), events(first, first), {tp::table_write::put(t, std::to_string(i), "v")},
             [&done, i](std::error_code ec) { done[i].set_value(ec); });
  }
  int failed = 0;
  for (int i = 0; i < n; ++i) {
    const auto ec = done[i].get_future().get();
    if (i % 10 == 9) {
      CHECK(ec == tp::errc::sequence_mismatch);
      ++failed;
      std::optional<std::string> v;
      REQUIRE(!s.get(t, std::to_string(i), v));
      CHECK_FALSE(v); // nothing of the failed write
    } else {
      CHECK_FALSE(ec);
    }
  }
  CHECK(failed == n / 10);
  const auto c = s.counts();
  INFO(c.commits << " commits for " << c.writes << " writes");
  CHECK(c.writes == n);
  CHECK(c.commits < c.writes);   // grouped
  CHECK(c.one_at_a_time >= 1);   // the groups with a failing write, again statement by statement
}

// The writes of IDs the store holds go as one statement per group (and
// their events as one more): a check that fails there still fails only its
// own write.
TEST_CASE("a group of writes of held IDs: a mismatch, a fenced ID and two writes of one ID in the group each end as alone") {
  test::pg::schema db;
  tp::postgres_store s(db.options());
  auto t = s.open_table("t");
  constexpr int n = 200;
  for (int i = 0; i < n; ++i) REQUIRE(!s.write("h-" + std::to_string(i), events(1, 1)));
  {
    tp::postgres_store other(db.options());
    REQUIRE(!other.claim("h-7")); // h-7 now has a newer writer
  }
  struct outcome {
    std::string pid;
    tp::sequence_nr first;
    std::promise<std::error_code> done;
  };
  std::vector<outcome> out;
  out.reserve(n + 1);
  for (int i = 0; i < n; ++i) {
    const tp::sequence_nr first = i % 10 == 3 ? 3 : 2; // every tenth skips a number
    out.push_back({"h-" + std::to_string(i), first, {}});
  }
  out.push_back({"h-5", 3, {}}); // a second write of h-5 in the same burst
  for (auto& o : out)
    s.submit(o.pid, events(o.first, o.first), {tp::table_write::put(t, o.pid + "/" + std::to_string(o.first), "v")},
             [&o](std::error_code ec) { o.done.set_value(ec); });
  for (auto& o : out) {
    const auto ec = o.done.get_future().get();
    INFO(o.pid << " from " << o.first << ": " << ec.message());
    std::optional<std::string> v;
    REQUIRE(!s.get(t, o.pid + "/" + std::to_string(o.first), v));
    if (o.pid == "h-7") {
      CHECK(ec == tp::errc::fenced);
      CHECK_FALSE(v);
    } else if (o.first == 3 && o.pid != "h-5") {
      CHECK(ec == tp::errc::sequence_mismatch);
      CHECK_FALSE(v);
    } else {
      CHECK_FALSE(ec);
      CHECK(v == "v");
    }
  }
  CHECK(s.highest_sequence_nr("h-5") == 3);
  CHECK(s.highest_sequence_nr("h-3") == 1);
  CHECK(s.highest_sequence_nr("h-0") == 2);
  CHECK(s.counts().one_at_a_time >= 1);
}

// The connection is cut after COMMIT was sent and before its answer came
// (every third commit): the write must complete with what happened to it,
// asked of the server, never with a blind failure for a write that did
// commit (a retry would then meet its own events), nor with success for one
// that did not.
TEST_CASE("a commit whose answer is lost is resolved with the server: acknowledged exactly when it committed") {
  test::pg::schema db;
  auto o = db.options();
  std::atomic<int> commits{0};
  o.cut_before_commit_answer = [&] { return ++commits % 3 == 0; };
  tp::postgres_store s(o);
  auto t = s.open_table("t");
  std::map<std::string, bool> acked;
  for (int i = 0; i < 60; ++i) {
    const auto pid = "p-" + std::to_string(i % 6);
    const auto next = s.highest_sequence_nr(pid) + 1;
    const auto ec = s.write(pid, events(next, next), {tp::table_write::put(t, pid + "/" + std::to_string(next), "v")});
    INFO("write " << i << ": " << ec.message() << " " << s.last_failure());
    CHECK((!ec || ec == tp::errc::storage_failure));
    acked[pid + "/" + std::to_string(next)] = !ec;
  }
  CHECK(s.counts().resolved >= 15);
  int ok = 0;
  for (auto& [key, was_acked] : acked) {
    std::optional<std::string> v;
    REQUIRE(!s.get(t, key, v));
    INFO(key);
    CHECK(v.has_value() == was_acked); // acknowledged exactly when it committed
    ok += was_acked;
  }
  CHECK(ok == 60); // (a cut after COMMIT was sent: each of them committed)
}

TEST_CASE("a table creation that fails (a statement timeout while another holds the schema lock) leaves the store usable") {
  test::pg::schema db;
  tp::postgres_store first(db.options()); // the schema exists
  auto o = db.options();
  o.conninfo += (o.conninfo.find('?') == std::string::npos ? "?" : "&") + std::string("options=-c%20statement_timeout%3D300");
  tp::postgres_store s(o);
  auto t = s.open_table("existing");
  REQUIRE(!s.write("", {}, {tp::table_write::put(t, "k", "v")}));
  {
    // Another session holds the lock that table creation takes.
    troupe::persistence::detail::pg::connection other(test::pg::conninfo(), db.name, true);
    REQUIRE(other.exec("BEGIN; SELECT pg_advisory_xact_lock(7404171)").ok());
    CHECK_THROWS_AS(s.open_table("new"), troupe::error);
    (void)other.exec("ROLLBACK");
  }
  // Its reads were left in an aborted transaction before: every one failed.
  std::optional<std::string> v;
  CHECK(!s.get(t, "k", v));
  CHECK(v == "v");
  CHECK(!s.claim("p"));
  CHECK_NOTHROW(s.open_table("new"));
}

TEST_CASE("drop_expired deletes only what expired: a value written after its scan stays") {
  test::pg::schema db;
  tp::postgres_store s(db.options());
  auto t = s.open_table("t");
  REQUIRE(!s.write("", {}, {tp::table_write::put(t, "k", "old")}));
  bool rewritten = false;
  std::error_code rewrite;
  // The expiry function runs during the scan: the value is replaced there,
  // after the scan read "old" and before the deletion.
  s.set_expiry(t, [&](std::string_view, std::string_view v) -> std::optional<std::int64_t> {
    if (v != "old") return std::nullopt; // never
    if (!rewritten) {
      rewritten = true;
      std::thread([&] { rewrite = s.write("", {}, {tp::table_write::put(t, "k", "new")}); }).join();
    }
    return 0; // long ago
  });
  REQUIRE(!s.drop_expired(t));
  REQUIRE(rewritten);
  REQUIRE_FALSE(rewrite);
  std::optional<std::string> v;
  REQUIRE(!s.get(t, "k", v));
  CHECK(v == "new");
}

TEST_CASE("the expiry floor is kept in the store: it never decreases, also across a reopen") {
  test::pg::schema db;
  std::int64_t floor = 0;
  {
    tp::postgres_store s(db.options());
    auto t = s.open_table("t");
    s.set_expiry(t, [](std::string_view, std::string_view) -> std::optional<std::int64_t> { return 0; });
    REQUIRE(!s.drop_expired(t));
    floor = s.expired_through();
    CHECK(floor > 0);
  }
  tp::postgres_store again(db.options());
  CHECK(again.expired_through() == floor);
}

TEST_CASE("a store's own claim is never undone by its own earlier first write committing after it") {
  test::pg::schema db;
  tp::postgres_store s(db.options());
  int fenced = 0;
  for (int i = 0; i < 300; ++i) {
    const auto pid = "p" + std::to_string(i);
    std::promise<std::error_code> first;
    s.submit(pid, events(1, 1), {}, [&](std::error_code ec) { first.set_value(ec); });
    REQUIRE(!s.claim(pid)); // may run before or after the first write commits
    REQUIRE(!first.get_future().get());
    const auto ec = s.write(pid, events(2, 2));
    if (ec == tp::errc::fenced) ++fenced;
    CHECK((!ec || ec == tp::errc::fenced));
  }
  CHECK(fenced == 0);
}

TEST_CASE("two stores writing the same keys in opposite orders do not fail each other's writes") {
  test::pg::schema db;
  tp::postgres_store a(db.options()), b(db.options());
  auto ta = a.open_table("t");
  auto tb = b.open_table("t");
  constexpr int keys = 30, rounds = 3;
  std::atomic<int> failed{0};
  auto run = [&](tp::postgres_store& s, tp::table t, bool reverse) {
    for (int r = 0; r < rounds; ++r) {
      std::vector<std::promise<std::error_code>> done(keys);
      for (int i = 0; i < keys; ++i) {
        const int k = reverse ? keys - 1 - i : i;
        s.submit("", {}, {tp::table_write::put(t, "k" + std::to_string(k), std::to_string(r))},
                 [&done, i](std::error_code ec) { done[i].set_value(ec); });
      }
      for (auto& d : done)
        if (d.get_future().get()) ++failed;
    }
  };
  std::thread x([&] { run(a, ta, false); });
  run(b, tb, true);
  x.join();
  CHECK(failed == 0);
}

TEST_CASE("a server that cannot be reached is storage_failure, naming the server's answer") {
  try {
    tp::postgres_options o;
    o.conninfo = "host=127.0.0.1 port=1 connect_timeout=2 dbname=x";
    tp::postgres_store s(o);
    FAIL("connected to nothing");
  } catch (const troupe::error& e) {
    CHECK(e.code() == tp::errc::storage_failure);
    CHECK(std::string(e.what()).find("connecting to PostgreSQL") != std::string::npos);
  }
}

TEST_CASE("the journal adapter runs a persistent actor's writes through the store's writer") {
  test::pg::schema db;
  auto store = std::make_shared<tp::postgres_store>(db.options());
  auto j = std::make_shared<tp::journal_of<tp::postgres_store>>(store);
  std::promise<std::error_code> p;
  j->write("p", events(1, 3), {}, [&](std::error_code ec) { p.set_value(ec); });
  REQUIRE_FALSE(p.get_future().get());
  CHECK(j->highest_sequence_nr("p") == 3);
}

// Several OS processes (fork, each with its own store and connections)
// take the same persistence ID from each other again and again: each claims,
// reads the highest number, and appends the next events with its name;
// one is killed with SIGKILL on the way. Every write a process saw
// acknowledged is in the journal with its payload, the numbers run without
// a gap or a repeat, and a write refused as fenced or mismatched left
// nothing.
TEST_CASE("several processes claiming one ID in turn: no number twice, no gap, every acknowledged write kept") {
  test::pg::schema db;
  const auto seed = std::random_device{}();
  INFO("seed " << seed);
  const std::string pid = "contended";
  {
    tp::postgres_store s(db.options()); // creates the schema before the children race
  }
  constexpr int processes = 4, rounds = 60;
  char dir_template[] = "/tmp/troupe-pg-XXXXXX";
  REQUIRE(mkdtemp(dir_template));
  const std::string dir = dir_template;
  std::vector<pid_t> children;
  for (int k = 0; k < processes; ++k) {
    const pid_t c = fork();
    REQUIRE(c >= 0);
    if (c == 0) {
      int code = 0;
      try {
        std::mt19937 rng(seed + k);
        tp::postgres_store s(db.options());
        std::ofstream acked(dir + "/acked-" + std::to_string(k));
        for (int r = 0; r < rounds; ++r) {
          if (rng() % 2 == 0 && s.claim(pid)) code = 2;
          const auto next = s.highest_sequence_nr(pid) + 1;
          const auto n = 1 + rng() % 3;
          const std::string payload = "{\"by\":" + std::to_string(k) + ",\"round\":" + std::to_string(r) + "}";
          const auto ec = s.write(pid, events(next, next + n - 1, payload));
          if (!ec) {
            acked << next << ' ' << n << ' ' << payload << '\n' << std::flush;
          } else if (ec != tp::errc::fenced && ec != tp::errc::sequence_mismatch) {
            code = 3;
          }
        }
      } catch (...) {
        code = 4;
      }
      std::_Exit(code);
    }
    children.push_back(c);
  }
  // One of them dies abruptly, somewhere in its rounds: once it has seen
  // a seeded number of its writes acknowledged (or has ended).
  const std::size_t acks_before_kill = 1 + seed % 20;
  const auto acks_of_first = [&] {
    std::ifstream in(dir + "/acked-0");
    std::size_t lines = 0;
    for (std::string l; std::getline(in, l);) ++lines;
    return lines;
  };
  int status0 = 0;
  bool reaped = false;
  CHECK(test::eventually([&] {
    reaped = reaped || ::waitpid(children[0], &status0, WNOHANG) == children[0];
    return reaped || acks_of_first() >= acks_before_kill;
  }));
  if (!reaped) ::kill(children[0], SIGKILL);
  for (std::size_t k = 0; k < children.size(); ++k) {
    int status = 0;
    if (k == 0) {
      if (!reaped) (void)::waitpid(children[0], &status, 0); // killed (or reaped above, having finished first)
      continue;
    }
    REQUIRE(::waitpid(children[k], &status, 0) == children[k]);
    INFO("process " << k);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  tp::postgres_store s(db.options());
  const auto all = replay(s, pid);
  REQUIRE(!all.empty());
  for (std::size_t i = 0; i < all.size(); ++i) REQUIRE(all[i].seq == i + 1); // no gap, no repeat
  CHECK(s.highest_sequence_nr(pid) == all.size());
  std::size_t acked_events = 0;
  for (int k = 0; k < processes; ++k) {
    std::ifstream in(dir + "/acked-" + std::to_string(k));
    tp::sequence_nr first;
    std::size_t n;
    std::string payload;
    while (in >> first >> n >> payload) {
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE(first + i <= all.size());
        CHECK(all[first + i - 1].payload == payload); // the acknowledged write, not another's
      }
      acked_events += n;
    }
  }
  // Process 0's last acknowledgement may have been lost with it: every
  // event is someone's acknowledged write, except at most its last one.
  CHECK(acked_events <= all.size());
  CHECK(all.size() - acked_events <= 3);
  std::filesystem::remove_all(dir);
}

} // namespace postgres_store_test
