// The mailbox queue on its own: order, the consumer's state, closing.
#include <troupe/detail/inbox.hpp>

#include <catch2/catch.hpp>

#include <memory>
#include <thread>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace core_detail_inbox_test {

using troupe::detail::envelope_base;
using troupe::detail::inbox;

namespace {
struct item : envelope_base {
  int sender = 0, n = 0;
};
} // namespace

TEST_CASE("a blocked inbox reports the first push as unblocked, later ones as queued") {
  inbox q(true);
  item a, b;
  CHECK(q.push(&a) == inbox::push_result::unblocked);
  CHECK(q.push(&b) == inbox::push_result::queued);
  auto* out = q.take_all();
  CHECK(out == &a);
  CHECK(out->next == &b);
  CHECK(b.next == nullptr);
  CHECK(q.take_all() == nullptr);
  CHECK(q.try_block());
  item c;
  CHECK(q.push(&c) == inbox::push_result::unblocked);
}

TEST_CASE("try_block fails while messages are waiting") {
  inbox q(false);
  item a;
  CHECK(q.push(&a) == inbox::push_result::queued);
  CHECK_FALSE(q.try_block());
  CHECK(q.take_all() == &a);
  CHECK(q.try_block());
}

TEST_CASE("a closed inbox refuses pushes and hands back what was queued, oldest first") {
  inbox q(false);
  item a, b;
  q.push(&a);
  q.push(&b);
  auto* left = q.close();
  CHECK(left == &a);
  CHECK(a.next == &b);
  CHECK(q.closed());
  item c;
  CHECK(q.push(&c) == inbox::push_result::closed);
  CHECK(q.close() == nullptr);
}

TEST_CASE("pushes from many threads all arrive, each sender's in order") {
  constexpr int senders = 4, per_sender = 20'000;
  inbox q(false);
  std::vector<std::unique_ptr<item[]>> items;
  for (int s = 0; s < senders; ++s) items.emplace_back(new item[per_sender]);
  std::vector<std::thread> threads;
  for (int s = 0; s < senders; ++s)
    threads.emplace_back([&, s] {
      for (int i = 0; i < per_sender; ++i) {
        items[s][i].sender = s;
        items[s][i].n = i;
        q.push(&items[s][i]);
      }
    });
  std::vector<int> next(senders, 0);
  int seen = 0;
  bool in_order = true;
  while (seen < senders * per_sender) {
    for (auto* e = q.take_all(); e; e = e->next) {
      auto* it = static_cast<item*>(e);
      in_order = in_order && it->n == next[it->sender];
      next[it->sender] = it->n + 1;
      ++seen;
    }
  }
  for (auto& t : threads) t.join();
  CHECK(in_order);
  CHECK(seen == senders * per_sender);
}

} // namespace core_detail_inbox_test
