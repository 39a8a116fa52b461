// troupe_bench_savina_caf: the workloads of bench/savina.cpp on CAF 0.17,
// written as idiomatic CAF (event-based actors, request(...).then, atoms).
// Same sizes, same checks, same reporting.
#include <caf/all.hpp>

#include "savina_common.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <vector>

namespace {

using caf::atom;
using caf::atom_constant;
using savina::check;

using ping_atom = atom_constant<atom("ping")>;
using pong_atom = atom_constant<atom("pong")>;
using add_atom = atom_constant<atom("add")>;
using get_atom = atom_constant<atom("get")>;
using token_atom = atom_constant<atom("token")>;
using work_atom = atom_constant<atom("work")>;
using go_atom = atom_constant<atom("go")>;
using meet_atom = atom_constant<atom("meet")>;
using met_atom = atom_constant<atom("met")>;
using noop_atom = atom_constant<atom("noop")>;
using grow_atom = atom_constant<atom("grow")>;
using grown_atom = atom_constant<atom("grown")>;
using item_atom = atom_constant<atom("item")>;

std::unique_ptr<caf::actor_system> make_system(caf::actor_system_config& cfg) {
  cfg.set("scheduler.max-threads", savina::threads);
  return std::make_unique<caf::actor_system>(cfg);
}

void stop_all(const std::vector<caf::actor>& actors) {
  for (auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

// -- pingpong -------------------------------------------------------------------

caf::behavior pong_fn(caf::event_based_actor*) {
  return {[](ping_atom, int n) { return n; }};
}

struct ping_state {
  caf::actor pong;
  int rounds = 0;
  int next = 0;
  long sum = 0;
  std::shared_ptr<std::promise<long>> done;
};

void ping_next(caf::stateful_actor<ping_state>* self) {
  auto& st = self->state;
  if (st.next == st.rounds) {
    st.done->set_value(st.sum);
    return;
  }
  self->request(st.pong, caf::infinite, ping_atom::value, st.next++).then([=](int r) {
    self->state.sum += r;
    ping_next(self);
  });
}

caf::behavior ping_fn(caf::stateful_actor<ping_state>* self, caf::actor pong, int rounds,
                      std::shared_ptr<std::promise<long>> done) {
  self->state.pong = std::move(pong);
  self->state.rounds = rounds;
  self->state.done = std::move(done);
  return {[=](go_atom) { ping_next(self); }};
}

void pingpong(benchmark::State& state) {
  caf::actor_system_config cfg;
  auto sys = make_system(cfg);
  const int n = savina::pingpong_rounds;
  for (auto _ : state) {
    auto done = std::make_shared<std::promise<long>>();
    auto result = done->get_future();
    auto pong = sys->spawn(pong_fn);
    auto ping = sys->spawn(ping_fn, pong, n, done);
    caf::anon_send(ping, go_atom::value);
    check(result.get() == long{n} * (n - 1) / 2, "pingpong sum");
    stop_all({ping, pong});
  }
  state.SetItemsProcessed(state.iterations() * 2L * n);
}

// -- counting -------------------------------------------------------------------

struct counter_state {
  long sum = 0;
};

caf::behavior counter_fn(caf::stateful_actor<counter_state>* self) {
  return {
      [=](add_atom, long n) { self->state.sum += n; },
      [=](get_atom) { return self->state.sum; },
  };
}

caf::behavior producer_fn(caf::event_based_actor* self, caf::actor counter, long n,
                          std::shared_ptr<std::promise<long>> done) {
  return {[=](go_atom) {
    for (long i = 0; i < n; ++i) self->send(counter, add_atom::value, 1L);
    self->request(counter, caf::infinite, get_atom::value).then([=](long total) { done->set_value(total); });
  }};
}

void counting(benchmark::State& state) {
  caf::actor_system_config cfg;
  auto sys = make_system(cfg);
  const long n = savina::counting_messages;
  for (auto _ : state) {
    auto done = std::make_shared<std::promise<long>>();
    auto result = done->get_future();
    auto c = sys->spawn(counter_fn);
    auto p = sys->spawn(producer_fn, c, n, done);
    caf::anon_send(p, go_atom::value);
    check(result.get() == n, "counting total");
    stop_all({c, p});
  }
  state.SetItemsProcessed(state.iterations() * (n + 1));
}

// -- threadring -----------------------------------------------------------------

struct ring_state {
  caf::actor next;
};

caf::behavior ring_fn(caf::stateful_actor<ring_state>* self, std::shared_ptr<std::promise<void>> done) {
  return {
      [=](caf::actor next) { self->state.next = std::move(next); },
      [=](token_atom, long remaining) {
        if (remaining == 0)
          done->set_value();
        else
          self->send(self->state.next, token_atom::value, remaining - 1);
      },
  };
}

void threadring(benchmark::State& state) {
  caf::actor_system_config cfg;
  auto sys = make_system(cfg);
  for (auto _ : state) {
    auto done = std::make_shared<std::promise<void>>();
    auto finished = done->get_future();
    std::vector<caf::actor> ring;
    for (int i = 0; i < savina::ring_actors; ++i) ring.push_back(sys->spawn(ring_fn, done));
    for (int i = 0; i < savina::ring_actors; ++i) caf::anon_send(ring[i], ring[(i + 1) % savina::ring_actors]);
    caf::anon_send(ring[0], token_atom::value, savina::ring_hops);
    finished.get();
    stop_all(ring);
  }
  state.SetItemsProcessed(state.iterations() * (savina::ring_hops + 1));
}

// -- forkjoin -------------------------------------------------------------------

struct fj_state {
  long received = 0;
  long sum = 0;
};

caf::behavior fj_worker_fn(caf::stateful_actor<fj_state>* self, long expected, std::shared_ptr<savina::join> done) {
  return {[=](work_atom, long v) {
    self->state.sum += v;
    if (++self->state.received == expected) {
      savina::check(self->state.sum == expected, "forkjoin sum");
      done->arrive();
    }
  }};
}

caf::behavior fj_producer_fn(caf::event_based_actor*, std::vector<caf::actor> workers, long each) {
  return {[=](go_atom) {
    for (long i = 0; i < each; ++i)
      for (auto& w : workers) caf::anon_send(w, work_atom::value, 1L);
  }};
}

void forkjoin(benchmark::State& state) {
  caf::actor_system_config cfg;
  auto sys = make_system(cfg);
  const long each = savina::forkjoin_messages_each;
  for (auto _ : state) {
    auto done = std::make_shared<savina::join>(savina::forkjoin_actors);
    auto finished = done->future();
    std::vector<caf::actor> workers;
    for (int i = 0; i < savina::forkjoin_actors; ++i) workers.push_back(sys->spawn(fj_worker_fn, each, done));
    auto p = sys->spawn(fj_producer_fn, workers, each);
    caf::anon_send(p, go_atom::value);
    finished.get();
    stop_all(workers);
    stop_all({p});
  }
  state.SetItemsProcessed(state.iterations() * each * savina::forkjoin_actors);
}

// -- spawn ----------------------------------------------------------------------

caf::behavior idle_fn(caf::event_based_actor*) {
  return {[](noop_atom) {}};
}

void spawn(benchmark::State& state) {
  const int n = savina::spawn_actors;
  double bytes_per_actor = 0;
  for (auto _ : state) {
    state.PauseTiming();
    caf::actor_system_config cfg;
    auto sys = make_system(cfg);
    std::vector<caf::actor> refs(n);
    const auto before = savina::resident_baseline();
    state.ResumeTiming();
    for (int i = 0; i < n; ++i) refs[i] = sys->spawn(idle_fn);
    state.PauseTiming();
    bytes_per_actor = std::max(bytes_per_actor, double(savina::resident_bytes() - before) / n);
    check(sys->registry().running() >= std::size_t(n), "spawned actors alive");
    stop_all(refs);
    refs.clear();
    sys.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["bytes_per_actor"] = bytes_per_actor;
}

// -- big ------------------------------------------------------------------------

struct big_state {
  std::uint32_t seed = 0;
  int received = 0;
};

using big_peers = std::shared_ptr<std::vector<caf::actor>>;

void big_send_ping(caf::stateful_actor<big_state>* self, int index, const big_peers& peers) {
  auto n = static_cast<std::uint32_t>(peers->size());
  auto peer = savina::next_random(self->state.seed) % (n - 1);
  if (peer >= static_cast<std::uint32_t>(index)) ++peer;
  self->send((*peers)[peer], ping_atom::value, index);
}

caf::behavior big_fn(caf::stateful_actor<big_state>* self, int index, big_peers peers,
                     std::shared_ptr<savina::join> done) {
  self->state.seed = 2463534242u + index;
  return {
      [=](go_atom) { big_send_ping(self, index, peers); },
      [=](ping_atom, int from) { self->send((*peers)[from], pong_atom::value); },
      [=](pong_atom) {
        if (++self->state.received == savina::big_pings_each)
          done->arrive();
        else
          big_send_ping(self, index, peers);
      },
  };
}

void big(benchmark::State& state) {
  caf::actor_system_config cfg;
  auto sys = make_system(cfg);
  for (auto _ : state) {
    auto done = std::make_shared<savina::join>(savina::big_actors);
    auto finished = done->future();
    auto peers = std::make_shared<std::vector<caf::actor>>();
    for (int i = 0; i < savina::big_actors; ++i) peers->push_back(sys->spawn(big_fn, i, peers, done));
    for (auto& p : *peers) caf::anon_send(p, go_atom::value);
    finished.get();
    stop_all(*peers);
    peers->clear();
  }
  state.SetItemsProcessed(state.iterations() * 2L * savina::big_actors * savina::big_pings_each);
}

// -- chameneos ------------------------------------------------------------------

struct broker_state {
  caf::actor waiting;
  int waiting_colour = 0;
  bool has_waiting = false;
  int held = 0;
};

caf::behavior broker_fn(caf::stateful_actor<broker_state>* self, int meetings,
                        std::shared_ptr<std::promise<int>> done) {
  return {[=](meet_atom, caf::actor who, int c) {
    auto& st = self->state;
    if (st.held == meetings) return;
    if (!st.has_waiting) {
      st.waiting = std::move(who);
      st.waiting_colour = c;
      st.has_waiting = true;
      return;
    }
    self->send(st.waiting, met_atom::value, c);
    self->send(who, met_atom::value, st.waiting_colour);
    st.waiting = nullptr;
    st.has_waiting = false;
    if (++st.held == meetings) done->set_value(st.held);
  }};
}

struct creature_state {
  savina::colour colour = savina::colour::blue;
};

caf::behavior creature_fn(caf::stateful_actor<creature_state>* self, caf::actor broker, int c) {
  self->state.colour = static_cast<savina::colour>(c);
  return {
      [=](go_atom) { self->send(broker, meet_atom::value, caf::actor{self}, static_cast<int>(self->state.colour)); },
      [=](met_atom, int other) {
        self->state.colour = savina::complement(self->state.colour, static_cast<savina::colour>(other));
        self->send(broker, meet_atom::value, caf::actor{self}, static_cast<int>(self->state.colour));
      },
  };
}

void chameneos(benchmark::State& state) {
  caf::actor_system_config cfg;
  auto sys = make_system(cfg);
  const int meetings = savina::chameneos_meetings;
  for (auto _ : state) {
    auto done = std::make_shared<std::promise<int>>();
    auto finished = done->get_future();
    auto b = sys->spawn(broker_fn, meetings, done);
    std::vector<caf::actor> creatures;
    for (int i = 0; i < savina::chameneos_creatures; ++i) creatures.push_back(sys->spawn(creature_fn, b, i % 3));
    for (auto& c : creatures) caf::anon_send(c, go_atom::value);
    check(finished.get() == meetings, "chameneos meetings");
    stop_all(creatures);
    stop_all({b});
  }
  state.SetItemsProcessed(state.iterations() * 4L * meetings);
}

// -- fjcreate -------------------------------------------------------------------

caf::behavior fj_child_fn(caf::event_based_actor* self, savina::join* done) {
  return {[=](go_atom) {
    done->arrive();
    self->quit();
  }};
}

void fjcreate(benchmark::State& state) {
  caf::actor_system_config cfg;
  auto sys = make_system(cfg);
  const int n = savina::fjcreate_actors;
  for (auto _ : state) {
    savina::join done(n);
    auto finished = done.future();
    for (int i = 0; i < n; ++i) caf::anon_send(sys->spawn(fj_child_fn, &done), go_atom::value);
    finished.get();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// -- spawntree --------------------------------------------------------------------

struct tree_state {
  long nodes = 0;
  int replies = 0;
};

caf::behavior tree_fn(caf::stateful_actor<tree_state>* self, caf::actor parent, std::promise<long>* root) {
  auto finish = [=](long nodes) {
    if (root)
      root->set_value(nodes);
    else
      self->send(parent, grown_atom::value, nodes);
    self->quit();
  };
  return {
      [=](grow_atom, int depth) {
        if (depth == 0) return finish(1);
        for (int i = 0; i < 2; ++i)
          self->send(self->spawn(tree_fn, caf::actor_cast<caf::actor>(self), nullptr), grow_atom::value, depth - 1);
      },
      [=](grown_atom, long nodes) {
        self->state.nodes += nodes;
        if (++self->state.replies == 2) finish(self->state.nodes + 1);
      },
  };
}

void spawntree(benchmark::State& state) {
  caf::actor_system_config cfg;
  auto sys = make_system(cfg);
  const long nodes = (2L << savina::spawntree_depth) - 1;
  for (auto _ : state) {
    std::promise<long> done;
    auto result = done.get_future();
    caf::anon_send(sys->spawn(tree_fn, caf::actor{}, &done), grow_atom::value, savina::spawntree_depth);
    check(result.get() == nodes, "spawntree nodes");
  }
  state.SetItemsProcessed(state.iterations() * 2 * nodes);
}

// -- pipeline ---------------------------------------------------------------------

struct stage_state {
  caf::actor next;
  long received = 0;
  long sum = 0;
};

caf::behavior stage_fn(caf::stateful_actor<stage_state>* self, long expected, std::shared_ptr<savina::join> done) {
  return {
      [=](caf::actor next) { self->state.next = std::move(next); },
      [=](item_atom, long v) {
        auto& st = self->state;
        if (st.next) {
          self->send(st.next, item_atom::value, v + 1);
          return;
        }
        st.sum += v;
        if (++st.received == expected) {
          savina::check(st.sum == expected * (savina::pipeline_stages - 1), "pipeline sum");
          done->arrive();
        }
      },
  };
}

caf::behavior source_fn(caf::event_based_actor* self, caf::actor first, long n) {
  return {[=](go_atom) {
    for (long i = 0; i < n; ++i) self->send(first, item_atom::value, 0L);
  }};
}

void pipeline(benchmark::State& state) {
  caf::actor_system_config cfg;
  auto sys = make_system(cfg);
  const long n = savina::pipeline_messages;
  for (auto _ : state) {
    auto done = std::make_shared<savina::join>(1);
    auto finished = done->future();
    std::vector<caf::actor> stages;
    for (int i = 0; i < savina::pipeline_stages; ++i) stages.push_back(sys->spawn(stage_fn, n, done));
    for (int i = 0; i + 1 < savina::pipeline_stages; ++i) caf::anon_send(stages[i], stages[i + 1]);
    auto src = sys->spawn(source_fn, stages[0], n);
    caf::anon_send(src, go_atom::value);
    finished.get();
    stop_all(stages);
    stop_all({src});
  }
  state.SetItemsProcessed(state.iterations() * n * savina::pipeline_stages);
}

} // namespace

int main(int argc, char** argv) {
  return savina::run(argc, argv, {pingpong, counting, threadring, forkjoin, spawn, big, chameneos, fjcreate, spawntree, pipeline});
}
