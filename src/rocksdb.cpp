// troupe::rocksdb_compiled: the RocksDB engine, compiled once
// (TROUPE_SEPARATE_COMPILATION).
#include <troupe/rocksdb/impl/src.hpp>
