// troupe::compiled: the core's and the layers' code that does not depend on
// a user's types, compiled once (TROUPE_SEPARATE_COMPILATION).
#include <troupe/impl/src.hpp>
