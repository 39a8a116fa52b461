// troupe::postgres_compiled: the PostgreSQL engine, compiled once
// (TROUPE_SEPARATE_COMPILATION).
#include <troupe/postgres/impl/src.hpp>
