#pragma once

/// \file
/// The RocksDB engine's compiled code, for `TROUPE_SEPARATE_COMPILATION`:
/// include it in exactly one source file of the program (the
/// `troupe::rocksdb_compiled` CMake target does), beside
/// `<troupe/impl/src.hpp>` and the layers' (`<troupe/persistence/impl/src.hpp>`, ...).

#if !defined(TROUPE_SEPARATE_COMPILATION)
#error <troupe/rocksdb/impl/src.hpp> is for TROUPE_SEPARATE_COMPILATION builds (define it in every file)
#endif

#include <troupe/rocksdb/store.hpp>
#include <troupe/rocksdb/impl/store.ipp>

namespace troupe::persistence {
template class journal_of<rocksdb_store>;
}

// The test kit's simulators keep their ledgers in RocksDB databases of
// their own (troupe/testing/payment_gateway.hpp, email_service.hpp).
#include <troupe/testing/detail/impl/ledger.ipp>
