#include <troupe/persistence/json.hpp>

#include <boost/describe/class.hpp>
#include <catch2/catch.hpp>

#include <string>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace persistence_json_test {

namespace tp = troupe::persistence;
namespace json = boost::json;

namespace {

struct described {
  long n = 0;
  std::string name;
  std::vector<int> list;
};
BOOST_DESCRIBE_STRUCT(described, (), (n, name, list))

struct hooked {
  int x = 0;
};
void tag_invoke(json::value_from_tag, json::value& v, const hooked& h) { v = {{"shape", "custom"}, {"x", h.x}}; }
hooked tag_invoke(json::value_to_tag<hooked>, const json::value& v) { return {json::value_to<int>(v.at("x"))}; }

struct opaque {};

} // namespace

TEST_CASE("a described type is JSON with no code of its own, and reads back") {
  described d{7, "seven", {1, 2}};
  auto text = tp::to_json_text(d);
  CHECK(text == R"({"n":7,"name":"seven","list":[1,2]})");
  auto back = tp::from_json_text<described>(text);
  CHECK(back.n == 7);
  CHECK(back.name == "seven");
  CHECK(back.list == std::vector<int>{1, 2});
  STATIC_REQUIRE(tp::json_convertible<described>);
}

TEST_CASE("tag_invoke gives a type a shape of its own") {
  CHECK(tp::to_json_text(hooked{3}) == R"({"shape":"custom","x":3})");
  CHECK(tp::from_json_text<hooked>(R"({"x":4})").x == 4);
  STATIC_REQUIRE(tp::json_convertible<hooked>);
  STATIC_REQUIRE_FALSE(tp::json_convertible<opaque>);
}

TEST_CASE("large values are serialized whole, past the stack buffer") {
  described d{1, std::string(100'000, 'x'), std::vector<int>(5'000, 9)};
  auto back = tp::from_json_text<described>(tp::to_json_text(d));
  CHECK(back.name.size() == 100'000);
  CHECK(back.list.size() == 5'000);
}

TEST_CASE("text that does not parse or does not convert throws") {
  CHECK_THROWS(tp::from_json_text<described>("{not json"));
  CHECK_THROWS(tp::from_json_text<described>(R"({"n":"seven"})"));
}

TEST_CASE("a string that is not UTF-8 (bytes of a binary value, Latin-1 text, a sequence cut short) reads back as "
          "the bytes written") {
  for (std::string bytes : {std::string("\xff\xfe\x00\x01", 4), std::string("caf\xe9"), std::string("\xc3"),
                            std::string("\xed\xa0\x80"), std::string("ok \xc3\xa9")}) {
    described d{1, bytes, {}};
    const auto text = tp::to_json_text(d);
    INFO(text);
    CHECK(tp::from_json_text<described>(text).name == bytes);
  }
}

} // namespace persistence_json_test

namespace persistence_plain_json_test {

TEST_CASE("to_plain_json writes floating-point numbers as plain decimals, the rest as serialize does") {
  boost::json::value v = {{"seconds", 0.096739452},
                          {"rate", 1083.6737096073598},
                          {"tiny", 1e-7},
                          {"n", 42},
                          {"neg", -2.5},
                          {"s", "a \"q\"\n"},
                          {"list", boost::json::array{1.5e6, true, nullptr}}};
  CHECK(troupe::persistence::to_plain_json(v) ==
        R"({"seconds":0.096739452,"rate":1083.6737096073598,"tiny":0.0000001,"n":42,"neg":-2.5,"s":"a \"q\"\n",)"
        R"("list":[1500000,true,null]})");
  CHECK(troupe::persistence::to_plain_json(boost::json::value(std::numeric_limits<double>::infinity())) == "null");
  // What it writes parses back to the same numbers.
  CHECK(boost::json::parse(troupe::persistence::to_plain_json(v)).at("rate").as_double() == 1083.6737096073598);
}

} // namespace persistence_plain_json_test
