#pragma once

// Options of the simulators, built field by field (GCC 12 warns about
// designated initializers that leave out members with default initializers).

#include <troupe/testing/simulator_options.hpp>

#include <string>

namespace test {

inline troupe::testing::simulator_options options(bool honours_keys, troupe::testing::gateway_faults faults = {},
                                                  std::string path = {}, bool sync = true) {
  troupe::testing::simulator_options o;
  o.honours_keys = honours_keys;
  o.faults = faults;
  o.path = std::move(path);
  o.sync = sync;
  return o;
}

inline troupe::testing::gateway_faults faults(double fail_before, double lose_response = 0, double decline = 0) {
  troupe::testing::gateway_faults f;
  f.fail_before = fail_before;
  f.lose_response = lose_response;
  f.decline = decline;
  return f;
}

} // namespace test
