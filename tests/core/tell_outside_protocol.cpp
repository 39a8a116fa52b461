// Must not compile: a message outside a reference's protocol (the test
// checks that the diagnostic names in_protocol and the message type).
#include <troupe/protocol.hpp>

struct add {
  int n;
};
struct total {};
struct not_in_the_protocol {};
using counter_protocol = troupe::protocol<void(add), int(total)>;

void f(const troupe::typed_ref<counter_protocol>& c) { c.tell(not_in_the_protocol{}); }
