// Big-endian integers, length-prefixed names, and the backoff and clock
// helpers of the core's detail.
#include <troupe/detail/bytes.hpp>

#include <troupe/detail/backoff.hpp>

#include <catch2/catch.hpp>

#include <random>
#include <string>

// In a namespace of its own: the tests build several files as one unit.
namespace core_detail_bytes_test {

using namespace std::chrono_literals;
namespace d = troupe::detail;

TEST_CASE("big-endian integers sort as their values and read back") {
  std::string a, b;
  d::put_u64(a, 255);
  d::put_u64(b, 256);
  CHECK(a < b);
  CHECK(a == std::string("\0\0\0\0\0\0\0\xff", 8));
  CHECK(d::get_be(b, 0, 8) == 256);
  std::string s;
  d::put_u16(s, 0x0102);
  d::put_u32(s, 0x03040506);
  CHECK(s == "\x01\x02\x03\x04\x05\x06");
  char raw[4];
  d::store_be<4>(raw, 0xA1B2C3D4u);
  CHECK(d::get_be(std::string_view(raw, 4), 0, 4) == 0xA1B2C3D4u);
  // RocksDB's formats are little-endian.
  CHECK(d::get_le(std::string_view(raw, 4), 0, 4) == 0xD4C3B2A1u);
  CHECK(d::get_le(std::string("\x05\x01\xff", 3), 1, 2) == 0xff01);
}

TEST_CASE("a length-prefixed name keeps one owner's keys apart from another's") {
  auto ab = d::prefixed("ab");
  CHECK(ab == std::string("\0\2ab", 4));
  CHECK(d::prefixed_length(ab + "rest") == 4);
  CHECK(d::prefixed_length("x") == 0);
  CHECK_FALSE((d::prefixed("a") + "b").starts_with(d::prefixed("ab")));
  CHECK_THROWS_AS(d::prefixed(std::string(70'000, 'x')), std::length_error);
}

TEST_CASE("a byte reader reads fields in order and throws when one is cut short") {
  std::string v;
  d::put_u32(v, 7);
  v += "abc";
  d::byte_reader in(v);
  CHECK(in.be(4) == 7);
  CHECK(in.take(2) == "ab");
  CHECK(in.remaining() == 1);
  CHECK_THROWS_AS(in.take(2), std::out_of_range);
  CHECK(in.rest() == "c");
}

TEST_CASE("exponential backoff doubles from the initial wait up to the cap, and jitter stays in its bounds") {
  CHECK(d::exponential_backoff(10ms, 100ms, 1) == 10ms);
  CHECK(d::exponential_backoff(10ms, 100ms, 2) == 20ms);
  CHECK(d::exponential_backoff(10ms, 100ms, 4) == 80ms);
  CHECK(d::exponential_backoff(10ms, 100ms, 5) == 100ms);
  CHECK(d::exponential_backoff(10ms, 100ms, 1'000'000) == 100ms);
  CHECK(d::exponential_backoff(std::chrono::milliseconds::max() / 3, std::chrono::milliseconds::max(), 3) ==
        std::chrono::milliseconds::max());
  std::mt19937 rng(3);
  for (int i = 0; i < 1000; ++i) {
    auto j = d::jittered(100ms, 0.2, rng);
    CHECK(j >= 80ms);
    CHECK(j <= 120ms);
  }
  CHECK(d::jittered(100ms, 0, rng) == 100ms);
}

} // namespace core_detail_bytes_test
