// The store conformance suite (tests/persistence/store_conformance_test.cpp)
// on PostgreSQL.
#include "support.hpp"

#include "../persistence/temp_dir.hpp"

namespace persistence_store_conformance_test {

struct postgres_fixture {
  test::pg::schema schema;
  troupe::persistence::postgres_store store{schema.options(troupe::persistence::durability::async)};
};

} // namespace persistence_store_conformance_test

#define TROUPE_CONFORMANCE_STORES postgres_fixture
#include "../persistence/store_conformance_test.cpp"
