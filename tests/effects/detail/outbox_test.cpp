// Outbox records on their own: what is written, and what was written by
// earlier code, reads back.
#include <troupe/effects/detail/outbox.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <variant>

// In a namespace of its own: the tests build several files as one unit.
namespace effects_detail_outbox_test {

namespace te = troupe::effects;

TEST_CASE("an outbox record reads back as written, its history included") {
  te::detail::record r;
  r.info.id = "op-1";
  r.info.type = "payment";
  r.info.owner = "order-1";
  r.info.status = te::effect_status::unknown;
  r.info.in_doubt = true;
  r.info.attempts = 2;
  r.info.queries = 1;
  r.info.round = 3;
  r.info.reason = "timeout";
  r.info.created_ms = 10;
  r.info.finished_ms = 20;
  r.due_ms = 30;
  r.request = R"({"amount":5})";
  for (int i = 0; i < 40; ++i) r.note(i, "execute", "unknown", "attempt " + std::to_string(i));
  CHECK(r.info.history.size() == te::detail::max_history);
  CHECK(r.info.history.front().detail == "attempt 8");
  auto back = te::detail::decode("op-1", te::detail::encode(r));
  CHECK(back.info.id == "op-1");
  CHECK(back.info.type == "payment");
  CHECK(back.info.owner == "order-1");
  CHECK(back.info.status == te::effect_status::unknown);
  CHECK(back.info.in_doubt);
  CHECK(back.info.attempts == 2);
  CHECK(back.info.queries == 1);
  CHECK(back.info.round == 3);
  CHECK(back.info.reason == "timeout");
  CHECK(back.info.created_ms == 10);
  CHECK(back.info.finished_ms == 20);
  CHECK(back.due_ms == 30);
  CHECK(back.request == r.request);
  REQUIRE(back.info.history.size() == te::detail::max_history);
  CHECK(back.info.history.back().time_ms == 39);
}

TEST_CASE("a record in the format the store has always held reads back") {
  const std::string stored =
      std::string(1, '\1') +
      R"({"type":"payment","owner":"o","status":"pending","in_doubt":false,"attempts":1,"queries":0,"round":0,)"
      R"("result":"","reason":"","created":5,"finished":0,"due":6,"request":"{}",)"
      R"("history":[{"t":5,"action":"execute","result":"failed","detail":"503"}]})";
  auto r = te::detail::decode("op", stored);
  CHECK(r.info.status == te::effect_status::pending);
  CHECK(r.info.attempts == 1);
  CHECK(r.due_ms == 6);
  REQUIRE(r.info.history.size() == 1);
  CHECK(r.info.history[0].detail == "503");
  CHECK(r.reporter.empty()); // written before records named their reporter
  CHECK_FALSE(r.confirmed);   // pending: nothing to confirm yet
  // Written again, the same fields and the newer ones after them (a reader
  // that does not know them skips them).
  CHECK(te::detail::encode(r) == stored.substr(0, stored.size() - 1) + R"(,"reporter":"","confirmed":false})");
  r.reporter = "dispatcher-2";
  CHECK(te::detail::decode("op", te::detail::encode(r)).reporter == "dispatcher-2");
  // A finished record of that format counts as confirmed (its outcome was
  // swept as confirmed then).
  auto done = stored;
  done.replace(done.find("\"pending\""), 9, "\"completed\"");
  CHECK(te::detail::decode("op", done).confirmed);
}

TEST_CASE("the store may drop a finished record once its outcome is confirmed and its time has come, never a pending "
          "or unknown one") {
  te::detail::record r;
  r.info.id = "op";
  r.info.status = te::effect_status::completed;
  r.info.finished_ms = 1000;
  const auto at = [&] {
    return te::detail::record_expiry(te::detail::outbox_key("op"), te::detail::encode(r), std::chrono::milliseconds(50),
                                     std::chrono::milliseconds(500));
  };
  CHECK_FALSE(at()); // not confirmed yet
  r.confirmed = true;
  CHECK(at() == 1050);
  r.info.status = te::effect_status::failed;
  CHECK(at() == 1500);
  r.info.status = te::effect_status::unknown;
  CHECK_FALSE(at());
  r.info.status = te::effect_status::pending;
  CHECK_FALSE(at());
  // A record that cannot be read is kept (the expiry throws), even when the
  // three members the expiry needs are there.
  CHECK_THROWS_AS(te::detail::record_expiry(te::detail::outbox_key("op"),
                                            "\1{\"status\":\"completed\",\"finished\":5,\"confirmed\":true}",
                                            std::chrono::milliseconds(50), std::chrono::milliseconds(500)),
                  troupe::error);
  // The pending index's entries are not records.
  CHECK_FALSE(te::detail::record_expiry(te::detail::pending_key("op"), "", std::chrono::milliseconds(50),
                                        std::chrono::milliseconds(500)));
}

TEST_CASE("an unreadable outbox record is corrupt_record, naming the operation") {
  for (std::string bad : {std::string(), std::string("\2{}"), std::string("\1{not json"), std::string("\1{}")}) {
    try {
      te::detail::decode("op-9", bad);
      FAIL("decoded");
    } catch (const troupe::error& e) {
      CHECK(e.code() == te::errc::corrupt_record);
      CHECK(std::string(e.what()).find("op-9") != std::string::npos);
    }
  }
}

namespace {

/// A record with random fields: strings with quotes, backslashes, control
/// characters, bytes past ASCII and NULs; numbers at their limits.
te::detail::record random_record(std::mt19937_64& rng) {
  const auto text = [&] {
    static constexpr char alphabet[] = "ab\"\\/\b\f\n\r\t\x01\x1f\x7f\xc3\xa9 {}:,";
    std::string s(rng() % 12, ' ');
    for (auto& c : s) c = rng() % 4 == 0 ? static_cast<char>(rng() % 256) : alphabet[rng() % (sizeof alphabet - 1)];
    return s;
  };
  const auto number = [&]() -> std::int64_t {
    switch (rng() % 4) {
    case 0: return 0;
    case 1: return std::numeric_limits<std::int64_t>::min();
    case 2: return std::numeric_limits<std::int64_t>::max();
    default: return static_cast<std::int64_t>(rng());
    }
  };
  const auto count = [&]() -> std::uint32_t {
    return rng() % 3 == 0 ? std::numeric_limits<std::uint32_t>::max() : static_cast<std::uint32_t>(rng() % 100);
  };
  te::detail::record r;
  r.info.type = text();
  r.info.owner = text();
  r.info.status = static_cast<te::effect_status>(rng() % 5);
  r.info.in_doubt = rng() % 2;
  r.info.attempts = count();
  r.info.queries = count();
  r.info.round = count();
  r.info.result = text();
  r.info.reason = text();
  r.info.created_ms = number();
  r.info.finished_ms = number();
  r.due_ms = number();
  r.request = text();
  for (auto n = rng() % 4; n > 0; --n) r.note(number(), text(), text(), text());
  r.reporter = text();
  r.confirmed = rng() % 2;
  return r;
}

bool same(const te::detail::record& a, const te::detail::record& b) {
  const auto& x = a.info;
  const auto& y = b.info;
  if (x.history.size() != y.history.size()) return false;
  for (std::size_t i = 0; i < x.history.size(); ++i)
    if (x.history[i].time_ms != y.history[i].time_ms || x.history[i].action != y.history[i].action ||
        x.history[i].result != y.history[i].result || x.history[i].detail != y.history[i].detail)
      return false;
  return x.id == y.id && x.type == y.type && x.owner == y.owner && x.status == y.status && x.in_doubt == y.in_doubt &&
         x.attempts == y.attempts && x.queries == y.queries && x.round == y.round && x.result == y.result &&
         x.reason == y.reason && x.created_ms == y.created_ms && x.finished_ms == y.finished_ms &&
         a.request == b.request && a.due_ms == b.due_ms && a.reporter == b.reporter && a.confirmed == b.confirmed;
}

/// What reading `v` gives: the record, or the error's code.
std::variant<te::detail::record, std::error_code> read_with(te::detail::record (*decode)(std::string_view, std::string_view),
                                                          const std::string& v) {
  try {
    return decode("op", v);
  } catch (const troupe::error& e) {
    return e.code();
  }
}

} // namespace

TEST_CASE("an outbox record is written byte for byte as its described form, and read as it reads, over random records "
          "and damaged ones") {
  const auto seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  int damaged_read = 0, damaged_refused = 0;
  for (int i = 0; i < 2000; ++i) {
    auto r = random_record(rng);
    r.info.id = "op";
    const auto v = te::detail::encode(r);
    REQUIRE(v == te::detail::encode_described(r));
    te::detail::record direct;
    REQUIRE(te::detail::record_text::reader(std::string_view(v).substr(1)).record(direct)); // not the fallback
    auto back = read_with(te::detail::decode, v);
    REQUIRE(std::holds_alternative<te::detail::record>(back));
    CHECK(same(std::get<te::detail::record>(back), r));
    // One byte changed, or the text cut short: both readers agree (the
    // same record, or both refuse it).
    auto bad = v;
    if (rng() % 4 == 0)
      bad.resize(rng() % bad.size());
    else
      bad[rng() % bad.size()] = static_cast<char>(rng() % 256);
    const auto fast = read_with(te::detail::decode, bad);
    const auto described = read_with(te::detail::decode_described, bad);
    REQUIRE(fast.index() == described.index());
    if (fast.index() == 0) {
      CHECK(same(std::get<0>(fast), std::get<0>(described)));
      ++damaged_read;
    } else {
      CHECK(std::get<1>(fast) == te::errc::corrupt_record);
      ++damaged_refused;
    }
  }
  // Both kinds of damage were met.
  CHECK(damaged_read > 0);
  CHECK(damaged_refused > 0);
}

TEST_CASE("a record of the current form with a member missing, doubled, of another type or out of range is read as "
          "the described form reads it") {
  te::detail::record r;
  r.info.id = "op";
  r.info.status = te::effect_status::completed;
  r.info.finished_ms = 5;
  r.confirmed = true;
  r.note(1, "execute", "completed", "");
  const auto v = te::detail::encode(r);
  const auto edit = [&](std::string_view from, std::string_view to) {
    auto s = v;
    const auto at = s.find(from);
    REQUIRE(at != std::string::npos);
    s.replace(at, from.size(), to);
    return s;
  };
  for (const auto& bad :
       {edit(R"(,"reporter":"")", ""), edit(R"(,"confirmed":true)", ""), edit(R"("attempts":0)", R"("attempts":-1)"),
        edit(R"("attempts":0)", R"("attempts":4294967296)"), edit(R"("round":0)", R"("round":1.0)"),
        edit(R"("due":0)", R"("due":18446744073709551615)"), edit(R"("due":0)", R"("due":-0)"),
        edit(R"("due":0)", R"("due":00)"), edit(R"("due":0)", R"("due":0e0)"), edit(R"("due":0)", R"("due": 0)"),
        edit(R"("type":"")", R"("type":"A\/")"), edit(R"("type":"")", R"("type":"")"),
        edit(R"(,"confirmed":true})", R"(,"confirmed":true} )"), edit(R"({"type")", R"({ "type")"), edit(R"("status":"completed")", R"("status":"done")"),
        edit(R"("status":"completed")", R"("status":2)"), edit(R"("type":"")", R"("type":"","type":"")"),
        edit(R"("type":"")", R"("type":null)"), edit(R"({"t":1,)", R"({"t":1,"x":0,)"),
        edit(R"("detail":"")", R"("detail":"","more":"")"), edit(R"("history":[)", R"("history":[1,)"),
        std::string("\1[]"), std::string("\1{}")}) {
    INFO(bad);
    const auto fast = read_with(te::detail::decode, bad);
    const auto described = read_with(te::detail::decode_described, bad);
    REQUIRE(fast.index() == described.index());
    if (fast.index() == 0) CHECK(same(std::get<0>(fast), std::get<0>(described)));
  }
}

} // namespace effects_detail_outbox_test
