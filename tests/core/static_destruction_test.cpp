// An actor system that is a global object: destroyed after main returns,
// in static destruction, when function-local statics first used after its
// construction are already gone. Its shutdown frees cells and envelopes on
// its workers and on this thread, and the recycling pool hands batches of
// them between threads: the pool's shared lists must outlive every such
// free (they were function-local statics: a batch handed over during the
// system's shutdown went into a destroyed vector, and glibc aborted with
// "double free or corruption" in about one exit of twenty).
//
// Not a Catch test: what it checks happens after main returns, so a
// failure is the process aborting (its exit status).
#include <troupe/troupe.hpp>
#include <troupe/detail/pool.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

struct ping {
  int n;
};
class sink {
public:
  void handle(ping) {}
};

namespace pool = troupe::detail::pool;
constexpr std::size_t block = 48; // a class the system's own blocks do not use here

/// Frees blocks on this thread in its destructor, after this thread's
/// pool cache and the pool's statics first used in main are destroyed:
/// four batches' worth (they go to the general allocator).
struct frees_at_exit {
  std::vector<void*> blocks;
  ~frees_at_exit() {
    for (auto* b : blocks) pool::deallocate(b, block);
  }
};

} // namespace

// Constructed before main, so destroyed after everything main first used.
frees_at_exit late;
troupe::actor_system global_sys{troupe::system_config{.threads = 2}};

int main() {
  // A shared list with one batch in it: first used now, after the globals.
  {
    std::vector<void*> b;
    for (std::uint32_t i = 0; i < 2 * pool::batch; ++i) b.push_back(pool::allocate(block));
    for (auto* p : b) pool::deallocate(p, block);
  }
  for (std::uint32_t i = 0; i < 4 * pool::batch; ++i) late.blocks.push_back(pool::allocate(block));
  // Actors with messages still queued when main returns.
  std::vector<troupe::actor_ref<sink>> refs;
  for (int i = 0; i < 2000; ++i) refs.push_back(global_sys.spawn<sink>());
  for (int k = 0; k < 100; ++k)
    for (auto& r : refs) r.tell(ping{k});
  std::puts("main returns; the global system shuts down after it");
  return 0;
}
