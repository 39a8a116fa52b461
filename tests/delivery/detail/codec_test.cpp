// The delivery tables' keys and values on their own.
#include <troupe/delivery/detail/codec.hpp>

#include <troupe/persistence/memory_store.hpp>

#include <catch2/catch.hpp>

#include <memory>

// In a namespace of its own: the tests build several files as one unit.
namespace delivery_detail_codec_test {

namespace d = troupe::delivery::detail;

TEST_CASE("delivery keys start with the owner's length-prefixed name, then the kind, then the ID") {
  auto prefix = d::key_prefix("shop");
  CHECK(prefix == std::string("\0\4shop", 6));
  CHECK(d::key(prefix, 'p', "order:1") == prefix + "porder:1");
  CHECK(d::key(prefix, 0, "order:1") == prefix + "order:1");
  // One owner's keys never start with another's prefix.
  CHECK_FALSE(d::key(d::key_prefix("shop-2"), 'p', "x").starts_with(prefix));
}

TEST_CASE("a pending delivery and a dead letter read back as written") {
  d::outgoing o{"warehouse", "order:1:picklist", "shop.picklist", 2, R"({"order":1})", 1234};
  std::uint32_t attempts = 9;
  std::int64_t dead = 9;
  auto back = d::decode_outgoing(o.id, d::encode_outgoing(o), &attempts, &dead);
  CHECK(back.to == o.to);
  CHECK(back.manifest == o.manifest);
  CHECK(back.version == 2);
  CHECK(back.payload == o.payload);
  CHECK(back.created_ms == 1234);
  CHECK(back.first_ms == 1234); // not re-queued: first recorded when created
  CHECK(attempts == 0);
  CHECK(dead == 0);
  d::decode_outgoing(o.id, d::encode_outgoing(o, 7, 99), &attempts, &dead);
  CHECK(attempts == 7);
  CHECK(dead == 99);
}

TEST_CASE("a re-queued delivery keeps its first record time; one of the first layout has its created time") {
  d::outgoing o{"warehouse", "order:1:picklist", "shop.picklist", 1, "{}", 5000, 1000};
  auto back = d::decode_outgoing(o.id, d::encode_outgoing(o));
  CHECK(back.created_ms == 5000);
  CHECK(back.first_recorded_ms() == 1000);
  // Format 1: format · to · manifest · version · created · attempts · dead · payload.
  std::string v1(1, d::value_format);
  troupe::detail::put_u32(v1, 9);
  v1 += "warehouse";
  troupe::detail::put_u32(v1, 13);
  v1 += "shop.picklist";
  troupe::detail::put_u32(v1, 1);
  troupe::detail::put_u64(v1, 777);
  troupe::detail::put_u32(v1, 4);
  troupe::detail::put_u64(v1, 0);
  v1 += "{}";
  std::uint32_t attempts = 0;
  back = d::decode_outgoing("id", v1, &attempts);
  CHECK(back.to == "warehouse");
  CHECK(back.created_ms == 777);
  CHECK(back.first_recorded_ms() == 777);
  CHECK(attempts == 4);
  CHECK(back.payload == "{}");
}

TEST_CASE("a dedup mark keeps its time and its reply, or its having none") {
  auto m = d::decode_mark(d::encode_mark(55, std::string("\"bin-1\"")));
  CHECK(m.time_ms == 55);
  CHECK(m.reply == "\"bin-1\"");
  CHECK(m.answers());
  m = d::decode_mark(d::encode_mark(56, std::nullopt));
  CHECK(m.time_ms == 56);
  CHECK(!m.reply);
}

TEST_CASE("a handler's failures and a rejection are kept under the mark's key") {
  auto f = d::decode_mark(d::encode_failure(false, 70, 2, "too big"));
  CHECK(f.what == d::dedup_marks::mark::state::failing);
  CHECK(f.time_ms == 70);
  CHECK(f.failures == 2);
  CHECK(f.reason == "too big");
  CHECK(!f.answers());
  auto r = d::decode_mark(d::encode_failure(true, 71, 5, "too big"));
  CHECK(r.what == d::dedup_marks::mark::state::rejected);
  CHECK(r.failures == 5);
  CHECK(r.answers());
  CHECK_THROWS_AS(d::decode_mark(std::string("\x04") + d::encode_mark(1, std::nullopt).substr(1)), troupe::error);
}

TEST_CASE("a mark is keyed by its sender and its ID, which never run into each other") {
  CHECK(d::mark_key("shop-a", "order:1") != d::mark_key("shop-b", "order:1"));
  CHECK(d::mark_key("ab", "c") != d::mark_key("a", "bc"));
  CHECK(d::sender_of_mark(d::mark_key("shop-a", "order:1")) == "shop-a");
  CHECK(d::sender_of_mark(d::mark_key("", "order:1")).empty());
}

TEST_CASE("a truncated or foreign value is corrupt_record") {
  d::outgoing o{"w", "id", "m", 1, "{}", 1};
  auto v = d::encode_outgoing(o);
  for (auto bad : {v.substr(0, 10), std::string("\x03") + v.substr(1), std::string()}) {
    CHECK_THROWS_MATCHES(d::decode_outgoing("id", bad), troupe::error, Catch::Predicate<troupe::error>([](auto& e) {
                           return e.code() == troupe::delivery::errc::corrupt_record;
                         }));
  }
  CHECK_THROWS_AS(d::decode_mark("\x01\x00"), troupe::error);
}

TEST_CASE("the delivery layer claims its work reason when it opens its tables; nobody else may mark with it") {
  auto j = std::make_shared<troupe::persistence::journal_of<troupe::persistence::memory_store>>(
      std::make_shared<troupe::persistence::memory_store>());
  (void)d::tables::of(*j);
  CHECK(troupe::persistence::work_index::reason_owner(troupe::delivery::work_reason) == "troupe.delivery");
  CHECK_THROWS_AS(troupe::persistence::work_index::claim_reason(troupe::delivery::work_reason, "an application"),
                  troupe::error);
}

} // namespace delivery_detail_codec_test
