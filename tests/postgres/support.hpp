#pragma once

// What the PostgreSQL tests share: the server ctest started
// (tests/postgres/server.sh, TROUPE_TEST_POSTGRES), and a schema of each
// test's own, dropped at its end.

#include <troupe/postgres/store.hpp>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>

namespace test::pg {

/// The test server's connection string. Not set: the test fails (it runs
/// through ctest, whose fixture starts the server).
inline std::string conninfo() {
  const char* c = std::getenv("TROUPE_TEST_POSTGRES");
  if (!c || !*c)
    throw std::runtime_error("TROUPE_TEST_POSTGRES is not set: run the PostgreSQL tests through ctest, which starts "
                             "a server of their own (tests/postgres/server.sh)");
  return c;
}

/// The test server's port (from its connection string, a
/// `postgresql://user@127.0.0.1:PORT/db` URI).
inline std::uint16_t server_port() {
  const auto c = conninfo();
  const auto at = c.find("127.0.0.1:");
  if (at == std::string::npos) throw std::runtime_error("the test server's address has no 127.0.0.1:PORT: " + c);
  return static_cast<std::uint16_t>(std::stoi(c.substr(at + 10)));
}

/// The test server's connection string with its port replaced by `port`
/// (a proxy's, say).
inline std::string conninfo_via(std::uint16_t port) {
  auto c = conninfo();
  const auto at = c.find("127.0.0.1:") + 10;
  auto end = at;
  while (end < c.size() && std::isdigit(static_cast<unsigned char>(c[end]))) ++end;
  return c.replace(at, end - at, std::to_string(port));
}

/// A schema name no other test uses.
inline std::string fresh_schema() {
  std::random_device rd;
  std::mt19937_64 g((std::uint64_t{rd()} << 32) | rd());
  return "t_" + std::to_string(g());
}

/// A schema of its own, dropped at the end.
struct schema {
  std::string name = fresh_schema();
  schema() = default;
  schema(const schema&) = delete;
  ~schema() {
    try {
      troupe::persistence::postgres_store::drop_schema(conninfo(), name);
    } catch (...) {
    }
  }
  troupe::persistence::postgres_options options(
      troupe::persistence::durability d = troupe::persistence::durability::sync) const {
    troupe::persistence::postgres_options o;
    o.conninfo = conninfo();
    o.schema = name;
    o.durability = d;
    return o;
  }
  /// The same, through 127.0.0.1:`port` (a proxy's) instead of the server.
  troupe::persistence::postgres_options options_via(std::uint16_t port) const {
    auto o = options();
    o.conninfo = conninfo_via(port);
    return o;
  }
};

} // namespace test::pg
