#pragma once

// Starting an actor's cell: the one way every actor comes to life (spawn,
// an entity's activation).

#include <troupe/config.hpp>
#include <troupe/error.hpp>
#include <troupe/detail/cell.hpp>
#include <troupe/detail/system_state.hpp>

#include <utility>

namespace troupe::detail {

/// Constructs a cell of type `Cell` (a `cell<T>`) from `args`, its actor
/// instance with it, registers it with `s` and starts it. Returns it, with a
/// reference for the caller. The constructor's exception propagates; throws
/// `troupe::error` with `errc::system_shutdown` once the system began
/// shutting down.
template <class T, class Cell, class... A>
cell_ptr<cell<T>> start_cell(system_state& s, const spawn_options& options, A&&... args) {
  const std::uint8_t shard = system_state::this_thread_home_shard();
  if (!s.begin_spawn(shard)) throw error(errc::system_shutdown, "spawn after the actor system began shutting down");
  struct spawning_done {
    system_state& s;
    std::uint8_t shard;
    ~spawning_done() { s.end_spawn(shard); }
  } counted{s, shard};
  // Until it is started, the actor's mailbox queues what is sent to it (by
  // its own constructor, say) and runs nothing.
  auto* c = new Cell(s, options, std::forward<A>(args)...);
  try {
    c->construct(true);
  } catch (...) {
    c->abandon();
    throw;
  }
  cell_ptr<cell<T>> ref(c); // before shutdown can see the cell
  // Registered while counted in `spawning`: a shutdown that began meanwhile
  // waits for this registration, then stops the actor with the others.
  c->enter_registry();
  c->start();
  return ref;
}

} // namespace troupe::detail
