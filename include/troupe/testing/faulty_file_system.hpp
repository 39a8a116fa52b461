#pragma once

/// \file
/// Forwards to `<troupe/rocksdb/faulty_file_system.hpp>` (a RocksDB file system that injects faults). The RocksDB engine moved to
/// `troupe/rocksdb/` after troupe 0.2: this path forwards
/// for one release (0.3) and is gone after it. Define
/// TROUPE_NO_MOVED_HEADER_NOTES to silence the note.

#if !defined(TROUPE_NO_MOVED_HEADER_NOTES)
#pragma message("<troupe/testing/faulty_file_system.hpp> moved to <troupe/rocksdb/faulty_file_system.hpp> (this path forwards for one release)")
#endif

#include <troupe/rocksdb/faulty_file_system.hpp>
