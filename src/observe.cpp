// troupe::observe_compiled: the metrics endpoint, compiled once
// (TROUPE_SEPARATE_COMPILATION).
#include <troupe/observe/impl/src.hpp>
