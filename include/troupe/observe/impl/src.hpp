#pragma once

/// \file
/// The metrics endpoint's compiled code, for `TROUPE_SEPARATE_COMPILATION`:
/// include it in exactly one source file of the program (the
/// `troupe::observe_compiled` CMake target does).

#if !defined(TROUPE_SEPARATE_COMPILATION)
#error <troupe/observe/impl/src.hpp> is for TROUPE_SEPARATE_COMPILATION builds (define it in every file)
#endif

#include <troupe/detail/compile_mode.hpp>

#include <troupe/observe/impl/endpoint.ipp>
