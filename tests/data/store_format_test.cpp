// A store written by an earlier troupe (on-disk format 1, tests/data/
// store-format-1, written by make_store.cpp) opens, is migrated to the
// current format, and every layer reads its records: events and snapshots,
// the deletion watermark, pending deliveries and dead letters, dedup marks,
// outbox records.
#include "store_actors.hpp"

#include <troupe/rocksdb/store.hpp>

#include "../persistence/temp_dir.hpp"
#include "../support.hpp"

#include <asio/use_future.hpp>

#include <troupe/persistence/detail/codec.hpp>
// The engine's own layout and RocksDB's API, which these tests reach into.
#include <troupe/rocksdb/detail/engine.hpp>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

using namespace store_data;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

fs::path format_1_store() { return fs::path(TROUPE_TEST_DATA) / "store-format-1"; }

/// A copy to open: opening a store may write to it.
void copy_store(const fs::path& to) { fs::copy(format_1_store(), to, fs::copy_options::recursive); }

using test::eventually;

/// Captures the acknowledgements sent to one name.
class ack_probe final : public td::endpoint {
public:
  void receive(td::message) override {}
  void acknowledge(td::acknowledgement a) override {
    std::lock_guard g(m_);
    acks_.push_back(std::move(a));
  }
  std::vector<td::acknowledgement> acks() {
    std::lock_guard g(m_);
    return acks_;
  }

private:
  std::mutex m_;
  std::vector<td::acknowledgement> acks_;
};

struct paid {
  te::outcome execute(const te::operation& op) {
    ++runs;
    return te::outcome::completed("paid " + op.id);
  }
  int runs = 0;
};

} // namespace

TEST_CASE("a store written by format 1 opens and every layer reads its records") {
  test::temp_dir dir;
  copy_store(dir.path);
  troupe::actor_system sys(troupe::system_config{.threads = 2});
  auto store = std::make_shared<tp::rocksdb_store>(dir.str());
  tp::set_journal(sys, std::make_shared<tp::journal_of<tp::rocksdb_store>>(store));
  auto net = td::set_transport(sys);

  SECTION("events, snapshots and the deletion watermark") {
    tp::persistence_options snapshots;
    snapshots.snapshots.every = 3;
    snapshots.snapshots.keep = 1;
    auto c = sys.spawn<counter>(troupe::persistence_id{"counter-1"}, snapshots);
    CHECK(c.ask(current{}, asio::use_future).get() == 15);
    std::optional<tp::snapshot_record> snap;
    REQUIRE_FALSE(store->load_snapshot("counter-1", {}, snap));
    REQUIRE(snap);
    CHECK(snap->seq == 3);
    CHECK(c.ask(increment{1}, asio::use_future).get() == 16);
    CHECK(store->highest_sequence_nr("counter-1") == 6);

    CHECK(store->highest_sequence_nr("trimmed-1") == 4);
    std::vector<tp::sequence_nr> seqs;
    REQUIRE_FALSE(store->replay("trimmed-1", 1, tp::max_sequence_nr, 100,
                                [&](const tp::event_record& e) { seqs.push_back(e.seq); }));
    CHECK(seqs == std::vector<tp::sequence_nr>{3, 4});
  }

  SECTION("a dedup mark answers a duplicate with the stored reply") {
    td::delivery_options o;
    o.dedup.retention = std::chrono::milliseconds::max();
    auto probe = std::make_shared<ack_probe>();
    net->bind("shop-1", probe);
    auto w = sys.spawn<warehouse>(troupe::persistence_id{"warehouse-1"}, o);
    CHECK(w.ask(placed_count{}, asio::use_future).get() == 1);
    net->send(
        td::message{"warehouse-1", "shop-1", td::delivery_id("picklist:9"), "data.picklist", 1, R"({"order":9})"});
    REQUIRE(eventually([&] { return !probe->acks().empty(); }));
    auto a = probe->acks().front();
    CHECK(a.id.str() == "picklist:9");
    REQUIRE(a.reply);
    CHECK(*a.reply == R"("bin-9")");
    auto st = w.ask(td::delivery_status{}, asio::use_future).get();
    CHECK(st.processed == 0);
    CHECK(st.duplicates == 1);
    CHECK(w.ask(placed_count{}, asio::use_future).get() == 1);
    // The receiver moved its marks of the first layout (by ID only) to the
    // current one, under an empty sender: they stand for any sender.
    auto old_table = store->find_table("dedup");
    REQUIRE(old_table);
    const auto prefix = td::detail::key_prefix("warehouse-1");
    std::size_t left = 0;
    REQUIRE_FALSE(store->scan(*old_table, prefix, [&](auto, auto) { return ++left, true; }));
    CHECK(left == 0);
    std::vector<std::string> moved;
    REQUIRE_FALSE(store->scan(*store->find_table("dedup_v2"), prefix, [&](std::string_view k, auto) {
      moved.emplace_back(k.substr(prefix.size()));
      return true;
    }));
    REQUIRE(moved.size() == 1);
    CHECK(moved[0] == td::detail::mark_key("", "picklist:9"));
    // A delivery of the same ID from another sender is answered from it too
    // (the first layout did not say which sender made it).
    net->send(
        td::message{"warehouse-1", "shop-2", td::delivery_id("picklist:9"), "data.picklist", 1, R"({"order":9})"});
    REQUIRE(eventually([&] { return w.ask(td::delivery_status{}, asio::use_future).get().duplicates == 2; }));
    CHECK(w.ask(placed_count{}, asio::use_future).get() == 1);
  }

  SECTION("pending deliveries are sent again and dead letters are listed") {
    td::delivery_options o;
    o.redelivery.initial_backoff = 10ms;
    o.redelivery.max_backoff = 50ms;
    // No horizon: the pending records are as old as the store (a horizon
    // would make them dead letters at once, never sent late).
    o.redelivery.max_attempts = 0;
    o.dedup.retention = std::chrono::milliseconds::max();
    auto w = sys.spawn<warehouse>(troupe::persistence_id{"warehouse-offline"}, o);
    auto s = sys.spawn<shop>(troupe::persistence_id{"shop-1"}, o);
    CHECK(s.ask(placed_count{}, asio::use_future).get() == 4);
    REQUIRE(eventually([&] { return w.ask(placed_count{}, asio::use_future).get() == 2; }));
    REQUIRE(eventually([&] { return s.ask(td::delivery_status{}, asio::use_future).get().unconfirmed == 0; }));
    auto dead = s.ask(td::list_dead_letters{}, asio::use_future).get();
    REQUIRE(dead.size() == 1);
    CHECK(dead[0].id.str() == "lost:1");
    CHECK(dead[0].to == "nobody");
    CHECK(dead[0].manifest == "data.picklist");
    CHECK(dead[0].attempts == 1);
  }

  SECTION("a pending outbox record is executed and its owner learns the outcome") {
    td::delivery_options o;
    o.redelivery.initial_backoff = 10ms;
    o.redelivery.max_backoff = 50ms;
    o.dedup.retention = std::chrono::milliseconds::max();
    auto own = sys.spawn<owner>(troupe::persistence_id{"owner-1"}, o);
    CHECK(own.ask(effect_of{"order:1:payment"}, asio::use_future).get().status == te::effect_status::pending);
    auto adapter = std::make_shared<paid>();
    te::adapters a;
    a.add("data.payment", adapter);
    te::dispatcher_options d;
    d.delivery = o;
    te::spawn_dispatcher(sys, std::move(a), d);
    REQUIRE(eventually([&] {
      return own.ask(effect_of{"order:1:payment"}, asio::use_future).get().status == te::effect_status::completed;
    }));
    auto e = own.ask(effect_of{"order:1:payment"}, asio::use_future).get();
    CHECK(e.result_as<std::string>() == "paid order:1:payment");
    CHECK(adapter->runs == 1);
  }
}

namespace {

std::vector<tp::event_record> all_events(tp::rocksdb_store& s, const std::string& pid) {
  std::vector<tp::event_record> out;
  REQUIRE_FALSE(s.replay(pid, 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& e) { out.push_back(e); }));
  return out;
}

std::string format_file(const fs::path& dir) {
  std::ifstream in(dir / "troupe-format");
  std::string v;
  in >> v;
  return v;
}

/// A format-1 event value, as the first release wrote it.
std::string format_1_event(const tp::event_record& e) {
  std::string body;
  troupe::detail::put_u32(body, e.version);
  troupe::detail::put_u16(body, static_cast<std::uint16_t>(e.manifest.size()));
  body += e.manifest;
  body += e.payload;
  std::string out;
  troupe::detail::put_u32(out, tp::detail::crc32c(body));
  return out + body;
}

} // namespace

TEST_CASE("opening a format-1 store migrates its events and snapshots to the current format, once") {
  test::temp_dir dir;
  copy_store(dir.path);
  std::vector<tp::event_record> before;
  {
    tp::rocksdb_store store(dir.str());
    CHECK(store.opened_format() == 1);
    CHECK(store.migrated_records() > 0);
    before = all_events(store, "counter-1");
    REQUIRE(before.size() == 5);
    for (auto& e : before) {
      CHECK(e.metadata.written_ms == 0); // format 1 kept no write time
      CHECK(e.metadata.entries.empty());
    }
    std::optional<tp::snapshot_record> snap;
    REQUIRE_FALSE(store.load_snapshot("counter-1", {}, snap));
    REQUIRE(snap);
    CHECK(snap->version == 1);
    CHECK(snap->seq == 3);
  }
  CHECK(format_file(dir.path) == std::to_string(tp::rocksdb_store::format_version));
  tp::rocksdb_store again(dir.str());
  CHECK(again.opened_format() == tp::rocksdb_store::format_version);
  CHECK(again.migrated_records() == 0);
  CHECK(all_events(again, "counter-1") == before);
  CHECK(all_events(again, "trimmed-1").size() == 2);
}

TEST_CASE("a migration interrupted part-way is finished at the next open") {
  test::temp_dir dir;
  copy_store(dir.path);
  std::vector<tp::event_record> before;
  {
    tp::rocksdb_store store(dir.str());
    before = all_events(store, "counter-1");
    // What a crash part-way leaves: the new format and the flag written,
    // some records still of format 1.
    auto& db = store.db();
    REQUIRE(db.Put(rocksdb::WriteOptions{}, store.meta_cf(), "migrating", "1").ok());
    const auto key = tp::detail::seq_key(tp::detail::id_prefix("counter-1"), 2);
    REQUIRE(db.Put(rocksdb::WriteOptions{}, store.journal_cf(), key, format_1_event(before[1])).ok());
    std::vector<tp::event_record> partly;
    CHECK(store.replay("counter-1", 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& e) {
      partly.push_back(e);
    }) == tp::errc::corrupt_record); // a format-1 value is no format-2 one
  }
  tp::rocksdb_store store(dir.str());
  CHECK(store.opened_format() == tp::rocksdb_store::format_version);
  CHECK(store.migrated_records() == 1);
  CHECK(all_events(store, "counter-1") == before);
  std::string flag;
  CHECK(store.db().Get(rocksdb::ReadOptions{}, store.meta_cf(), "migrating", &flag).IsNotFound());
}

TEST_CASE("a new store is of the current format and needs no migration") {
  test::temp_dir dir;
  tp::rocksdb_store store(dir.str());
  CHECK(store.opened_format() == tp::rocksdb_store::format_version);
  CHECK(store.migrated_records() == 0);
  CHECK(format_file(dir.path) == std::to_string(tp::rocksdb_store::format_version));
}
