#pragma once

/// \file
/// The effects layer's compiled code, for `TROUPE_SEPARATE_COMPILATION`: include it in exactly one source
/// file of the program (the `troupe::persistence_compiled` CMake target
/// does, with the persistence, delivery and effects layers' files).

#if !defined(TROUPE_SEPARATE_COMPILATION)
#error <troupe/effects/impl/src.hpp> is for TROUPE_SEPARATE_COMPILATION builds (define it in every file)
#endif

#include <troupe/detail/compile_mode.hpp>

// The layer's error category: one object for the whole program.
#include <troupe/effects/impl/error.ipp>

// The dispatcher and its attempts (no user type in them).
#include <troupe/effects/impl/attempt.ipp>
#include <troupe/effects/impl/dispatcher.ipp>

// The outbox record's stored form (Boost.JSON and Describe behind it).
#include <troupe/effects/impl/record_codec.ipp>
