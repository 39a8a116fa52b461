#pragma once

/// \file
/// troupe's compiled code, for `TROUPE_SEPARATE_COMPILATION`: include it in
/// exactly one source file of the program (the `troupe::compiled` CMake
/// target does). The layers above the core have their own
/// (`<troupe/persistence/impl/src.hpp>`, `<troupe/delivery/impl/src.hpp>`,
/// `<troupe/effects/impl/src.hpp>`), and so has each engine
/// (`<troupe/rocksdb/impl/src.hpp>`, `<troupe/postgres/impl/src.hpp>`).

#if !defined(TROUPE_SEPARATE_COMPILATION)
#error <troupe/impl/src.hpp> is for TROUPE_SEPARATE_COMPILATION builds (define it in every file)
#endif

#include <troupe/detail/compile_mode.hpp>

// The core's error category: one object for the whole program.
#include <troupe/impl/error.ipp>

// The metrics' snapshot and registry, and what the core reports in them.
#include <troupe/impl/metrics.ipp>
#include <troupe/detail/impl/core_metrics.ipp>
