// troupe::compiled: the core's and the layers' code that does not depend on
// a user's types, compiled once (TROUPE_SEPARATE_COMPILATION).
#include <troupe/impl/src.hpp>

// Asio's sources too, with -DTROUPE_COMPILED_ASIO=ON (CMake), which defines
// ASIO_SEPARATE_COMPILATION for every file that links troupe::compiled.
#if defined(TROUPE_COMPILE_ASIO_SOURCES)
#include <asio/impl/src.hpp>
#endif
