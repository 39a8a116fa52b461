// pipeline: stages that know each other only by protocol.
//
// Each stage holds a typed_ref<stage> to the next: it never names the next
// stage's class, so stages of different classes chain in any order, and a
// module could define its stages without seeing the others. A class that
// lacks a handler of the protocol, or replies with another type, is refused
// where it is made into a typed_ref<stage> (a compile error naming the
// message).
#include <troupe/troupe.hpp>

#include <cstdio>
#include <vector>

struct item {
  long value;
};
struct drain {
  using reply_type = long; // answered later by the sink
};
/// What every stage accepts: items (told), drain (asked: the sum at the end).
using stage = troupe::protocol<void(item), long(drain)>;

class scale_by {
public:
  scale_by(long factor, troupe::typed_ref<stage> next) : factor_(factor), next_(std::move(next)) {}
  void handle(item i) { next_.tell(item{i.value * factor_}); }
  troupe::task<long> handle(drain) { co_return co_await next_.ask(drain{}); } // in order: after every item

private:
  long factor_;
  troupe::typed_ref<stage> next_;
};

class keep_odd {
public:
  explicit keep_odd(troupe::typed_ref<stage> next) : next_(std::move(next)) {}
  void handle(item i) {
    if (i.value % 2 != 0) next_.tell(i);
  }
  troupe::task<long> handle(drain) { co_return co_await next_.ask(drain{}); }

private:
  troupe::typed_ref<stage> next_;
};

class sink {
public:
  void handle(item i) { sum_ += i.value; }
  void handle(drain, troupe::reply_promise<long> p) { p.deliver(sum_); }

private:
  long sum_ = 0;
};

int main() {
  troupe::actor_system sys;
  // Built back to front: sink <- scale_by(3) <- keep_odd <- scale_by(1).
  troupe::typed_ref<stage> head = sys.spawn<sink>();
  head = sys.spawn<scale_by>(3L, head);
  head = sys.spawn<keep_odd>(head);
  head = sys.spawn<scale_by>(1L, head);

  for (long v = 1; v <= 1000; ++v) head.tell(item{v});
  long sum = head.ask(drain{}, asio::use_future).get();
  // The odd numbers up to 1000 sum to 250,000; times 3.
  std::printf("sum %ld\n", sum);
  return sum == 750000 ? 0 : 1;
}
