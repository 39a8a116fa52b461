// troupe::persistence_compiled: the persistence, delivery and effects
// layers' code that does not depend on a user's types, compiled once
// (TROUPE_SEPARATE_COMPILATION).
#include <troupe/persistence/impl/src.hpp>
#include <troupe/delivery/impl/src.hpp>
#include <troupe/effects/impl/src.hpp>
