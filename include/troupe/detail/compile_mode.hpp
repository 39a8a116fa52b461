#pragma once

/// \file
/// Header-only (the default) or separately compiled.
///
/// Header-only: every function is defined in the headers, `inline`.
/// Separately compiled: define `TROUPE_SEPARATE_COMPILATION` in every file
/// that includes troupe (the `troupe::compiled` CMake targets do), and
/// compile, once in the program, a file that includes `<troupe/impl/src.hpp>`
/// (and `<troupe/rocksdb/impl/src.hpp>`, `<troupe/postgres/impl/src.hpp>`
/// for the engines it uses). The headers then declare the code that does
/// not depend on a user's types, and that file defines it: the engines, and
/// what they include (RocksDB's headers, libpq's), are compiled once.

#if defined(TROUPE_SEPARATE_COMPILATION)
#define TROUPE_DECL
#else
#define TROUPE_HEADER_ONLY 1
#define TROUPE_DECL inline
#endif
