#pragma once

/// \file
/// The PostgreSQL engine's compiled code, for `TROUPE_SEPARATE_COMPILATION`:
/// include it in exactly one source file of the program (the
/// `troupe::postgres_compiled` CMake target does), beside
/// `<troupe/impl/src.hpp>` and the layers' (`<troupe/persistence/impl/src.hpp>`, ...).

#if !defined(TROUPE_SEPARATE_COMPILATION)
#error <troupe/postgres/impl/src.hpp> is for TROUPE_SEPARATE_COMPILATION builds (define it in every file)
#endif

#include <troupe/postgres/store.hpp>
#include <troupe/postgres/impl/store.ipp>

namespace troupe::persistence {
template class journal_of<postgres_store>;
}
