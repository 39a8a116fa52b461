#pragma once

/// \file
/// The delivery layer's compiled code, for `TROUPE_SEPARATE_COMPILATION`: include it in exactly one source
/// file of the program (the `troupe::persistence_compiled` CMake target
/// does, with the persistence, delivery and effects layers' files).

#if !defined(TROUPE_SEPARATE_COMPILATION)
#error <troupe/delivery/impl/src.hpp> is for TROUPE_SEPARATE_COMPILATION builds (define it in every file)
#endif

#include <troupe/detail/compile_mode.hpp>

// The layer's error category: one object for the whole program.
#include <troupe/delivery/impl/error.ipp>

// The transports' bookkeeping and the stored forms of deliveries and marks.
#include <troupe/delivery/impl/transport.ipp>
#include <troupe/delivery/impl/codec.ipp>

// A sender's outgoing deliveries (no actor type in them).
#include <troupe/delivery/impl/outgoing_tracker.ipp>
