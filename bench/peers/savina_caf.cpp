// troupe_bench_savina_caf: the workloads of bench/savina.cpp on CAF 0.17,
// written as idiomatic CAF (event-based actors, request(...).then, atoms).
// Same sizes, same checks, same reporting.
#include <caf/all.hpp>

#include "savina_common.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
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
using bb_data_atom = atom_constant<atom("bbdata")>;
using bb_produce_atom = atom_constant<atom("bbproduce")>;
using bb_avail_atom = atom_constant<atom("bbavail")>;
using bb_item_atom = atom_constant<atom("bbitem")>;
using lm_compute_atom = atom_constant<atom("lmcompute")>;
using lm_result_atom = atom_constant<atom("lmresult")>;
using lm_next_atom = atom_constant<atom("lmnext")>;
using tz_work_atom = atom_constant<atom("tzwork")>;
using tz_area_atom = atom_constant<atom("tzarea")>;
using credit_atom = atom_constant<atom("credit")>;
using deposit_atom = atom_constant<atom("deposit")>;
using deposited_atom = atom_constant<atom("deposited")>;
using done_atom = atom_constant<atom("done")>;
using audit_atom = atom_constant<atom("audit")>;
using sort_atom = atom_constant<atom("sortval")>;

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

// -- bndbuffer ----------------------------------------------------------------------

using actors = std::shared_ptr<std::vector<caf::actor>>;

struct bb_manager_state {
  std::deque<long> buffer;
  std::deque<int> idle_consumers, waiting_producers;
  long consumed = 0;
  long sum = 0;
};

caf::behavior bb_manager_fn(caf::stateful_actor<bb_manager_state>* self, actors producers, actors consumers,
                            std::promise<long>* done) {
  return {
      [=](bb_data_atom, long v, int producer) {
        auto& st = self->state;
        if (!st.idle_consumers.empty()) {
          self->send((*consumers)[st.idle_consumers.front()], bb_item_atom::value, v);
          st.idle_consumers.pop_front();
        } else {
          st.buffer.push_back(v);
        }
        if (st.buffer.size() < std::size_t(savina::bb_buffer))
          self->send((*producers)[producer], bb_produce_atom::value);
        else
          st.waiting_producers.push_back(producer);
      },
      [=](bb_avail_atom, int consumer, bool consumed, long v) {
        auto& st = self->state;
        if (consumed) {
          st.sum += v;
          if (++st.consumed == long{savina::bb_producers} * savina::bb_items_each) done->set_value(st.sum);
        }
        if (st.buffer.empty()) {
          st.idle_consumers.push_back(consumer);
          return;
        }
        self->send((*consumers)[consumer], bb_item_atom::value, st.buffer.front());
        st.buffer.pop_front();
        if (!st.waiting_producers.empty()) {
          self->send((*producers)[st.waiting_producers.front()], bb_produce_atom::value);
          st.waiting_producers.pop_front();
        }
      },
  };
}

struct bb_producer_state {
  std::uint32_t seed = 0;
  int produced = 0;
};

caf::behavior bb_producer_fn(caf::stateful_actor<bb_producer_state>* self, int index, caf::actor manager) {
  self->state.seed = savina::seed_of(index);
  return {[=](bb_produce_atom) {
    auto& st = self->state;
    if (st.produced == savina::bb_items_each) return;
    ++st.produced;
    self->send(manager, bb_data_atom::value, savina::bb_item(st.seed), index);
  }};
}

caf::behavior bb_consumer_fn(caf::event_based_actor* self, int index, caf::actor manager) {
  return {[=](bb_item_atom, long v) { self->send(manager, bb_avail_atom::value, index, true, v); }};
}

void bndbuffer(benchmark::State& state) {
  caf::actor_system_config cfg;
  auto sys = make_system(cfg);
  const long expected = savina::bb_expected_sum();
  for (auto _ : state) {
    std::promise<long> done;
    auto result = done.get_future();
    auto producers = std::make_shared<std::vector<caf::actor>>();
    auto consumers = std::make_shared<std::vector<caf::actor>>();
    auto manager = sys->spawn(bb_manager_fn, producers, consumers, &done);
    for (int i = 0; i < savina::bb_producers; ++i) producers->push_back(sys->spawn(bb_producer_fn, i, manager));
    for (int i = 0; i < savina::bb_consumers; ++i) consumers->push_back(sys->spawn(bb_consumer_fn, i, manager));
    for (int i = 0; i < savina::bb_consumers; ++i) caf::anon_send(manager, bb_avail_atom::value, i, false, 0L);
    for (auto& p : *producers) caf::anon_send(p, bb_produce_atom::value);
    check(result.get() == expected, "bndbuffer sum");
    stop_all(*producers);
    stop_all(*consumers);
    stop_all({manager});
  }
  state.SetItemsProcessed(state.iterations() * 4L * savina::bb_producers * savina::bb_items_each);
}

// -- logmap -----------------------------------------------------------------------

caf::behavior lm_computer_fn(caf::event_based_actor* self, double rate) {
  return {[=](lm_compute_atom, double x, caf::actor to) { self->send(to, lm_result_atom::value, savina::logistic(rate, x)); }};
}

struct lm_series_state {
  double x = 0.5;
  bool asking = false;
  int pending = 0;
  int computed = 0;
};

caf::behavior lm_series_fn(caf::stateful_actor<lm_series_state>* self, caf::actor computer, double* last,
                           savina::join* done) {
  return {
      [=](lm_next_atom) {
        auto& st = self->state;
        if (st.asking) {
          ++st.pending;
          return;
        }
        st.asking = true;
        self->send(computer, lm_compute_atom::value, st.x, caf::actor_cast<caf::actor>(self));
      },
      [=](lm_result_atom, double x) {
        auto& st = self->state;
        st.x = x;
        if (++st.computed == savina::logmap_terms) {
          *last = x;
          done->arrive();
        }
        if (st.pending == 0) {
          st.asking = false;
          return;
        }
        --st.pending;
        self->send(computer, lm_compute_atom::value, st.x, caf::actor_cast<caf::actor>(self));
      },
  };
}

caf::behavior lm_master_fn(caf::event_based_actor* self, std::vector<caf::actor> series) {
  return {[=](go_atom) {
    for (int t = 0; t < savina::logmap_terms; ++t)
      for (auto& s : series) self->send(s, lm_next_atom::value);
  }};
}

void logmap(benchmark::State& state) {
  caf::actor_system_config cfg;
  auto sys = make_system(cfg);
  for (auto _ : state) {
    std::vector<double> last(savina::logmap_series);
    savina::join done(savina::logmap_series);
    auto finished = done.future();
    std::vector<caf::actor> computers, series;
    for (int i = 0; i < savina::logmap_series; ++i) {
      computers.push_back(sys->spawn(lm_computer_fn, savina::logmap_start_rate + i * savina::logmap_rate_step));
      series.push_back(sys->spawn(lm_series_fn, computers.back(), &last[i], &done));
    }
    auto master = sys->spawn(lm_master_fn, series);
    caf::anon_send(master, go_atom::value);
    finished.get();
    for (int i = 0; i < savina::logmap_series; ++i) check(last[i] == savina::logmap_expected(i), "logmap term");
    stop_all(computers);
    stop_all(series);
    stop_all({master});
  }
  state.SetItemsProcessed(state.iterations() * 3L * savina::logmap_series * savina::logmap_terms);
}

// -- trapezoid --------------------------------------------------------------------

caf::behavior tz_worker_fn(caf::event_based_actor* self, caf::actor master) {
  return {[=](tz_work_atom, long first, long last) {
    self->send(master, tz_area_atom::value, savina::trapezoid_area(first, last));
  }};
}

struct tz_master_state {
  double sum = 0;
  int received = 0;
};

caf::behavior tz_master_fn(caf::stateful_actor<tz_master_state>* self, std::promise<double>* done) {
  return {[=](tz_area_atom, double area) {
    self->state.sum += area;
    if (++self->state.received == savina::trapezoid_workers) done->set_value(self->state.sum);
  }};
}

void trapezoid(benchmark::State& state) {
  caf::actor_system_config cfg;
  auto sys = make_system(cfg);
  const long each = savina::trapezoid_pieces / savina::trapezoid_workers;
  for (auto _ : state) {
    std::promise<double> done;
    auto result = done.get_future();
    auto master = sys->spawn(tz_master_fn, &done);
    std::vector<caf::actor> workers;
    for (int i = 0; i < savina::trapezoid_workers; ++i) workers.push_back(sys->spawn(tz_worker_fn, master));
    for (int i = 0; i < savina::trapezoid_workers; ++i)
      caf::anon_send(workers[i], tz_work_atom::value, long{i} * each, long{i + 1} * each);
    check(std::abs(result.get() - savina::trapezoid_exact()) < 1e-6, "trapezoid area");
    stop_all(workers);
    stop_all({master});
  }
  state.SetItemsProcessed(state.iterations() * 2L * savina::trapezoid_workers);
}

// -- banking ----------------------------------------------------------------------

struct account_state {
  long balance = savina::banking_initial;
};

caf::behavior account_fn(caf::stateful_actor<account_state>* self, int index, actors all, caf::actor teller,
                         std::atomic<long>* total, savina::join* audited) {
  return {
      [=](credit_atom, long amount, int to) {
        self->state.balance -= amount;
        self->send((*all)[to], deposit_atom::value, amount, index);
      },
      [=](deposit_atom, long amount, int from) {
        self->state.balance += amount;
        self->send((*all)[from], deposited_atom::value);
      },
      [=](deposited_atom) { self->send(teller, done_atom::value); },
      [=](audit_atom) {
        total->fetch_add(self->state.balance, std::memory_order_relaxed);
        audited->arrive();
      },
  };
}

struct teller_state {
  int done = 0;
};

caf::behavior teller_fn(caf::stateful_actor<teller_state>* self, actors all, std::promise<void>* done) {
  return {
      [=](go_atom) {
        std::uint32_t seed = savina::seed_of();
        for (int i = 0; i < savina::banking_transfers; ++i) {
          const auto x = savina::next_transfer(seed);
          self->send((*all)[x.from], credit_atom::value, x.amount, x.to);
        }
      },
      [=](done_atom) {
        if (++self->state.done == savina::banking_transfers) done->set_value();
      },
  };
}

void banking(benchmark::State& state) {
  caf::actor_system_config cfg;
  auto sys = make_system(cfg);
  for (auto _ : state) {
    std::promise<void> done;
    auto finished = done.get_future();
    std::atomic<long> total{0};
    savina::join audited(savina::banking_accounts);
    auto audit_done = audited.future();
    auto all = std::make_shared<std::vector<caf::actor>>();
    auto teller = sys->spawn(teller_fn, all, &done);
    for (int i = 0; i < savina::banking_accounts; ++i) all->push_back(sys->spawn(account_fn, i, all, teller, &total, &audited));
    caf::anon_send(teller, go_atom::value);
    finished.get();
    for (auto& a : *all) caf::anon_send(a, audit_atom::value);
    audit_done.get();
    check(total.load() == long{savina::banking_accounts} * savina::banking_initial, "banking total");
    stop_all(*all);
    stop_all({teller});
    all->clear();
  }
  state.SetItemsProcessed(state.iterations() * 4L * savina::banking_transfers);
}

// -- radixsort --------------------------------------------------------------------

struct sort_check {
  long count = 0;
  long sum = 0;
  long last = -1;
  bool ordered = true;
};

struct sort_stage_state {
  std::vector<long> held;
  long received = 0;
};

caf::behavior sort_stage_fn(caf::stateful_actor<sort_stage_state>* self, int bit, caf::actor next, sort_check* check,
                            savina::join* done) {
  return {[=](sort_atom, long v) {
    if (!next) {
      check->ordered = check->ordered && v >= check->last;
      check->last = v;
      check->sum += v;
      if (++check->count == savina::radix_values) done->arrive();
      return;
    }
    auto& st = self->state;
    if (v & (long{1} << bit))
      st.held.push_back(v);
    else
      self->send(next, sort_atom::value, v);
    if (++st.received == savina::radix_values) {
      for (long h : st.held) self->send(next, sort_atom::value, h);
      st.held.clear();
      st.received = 0;
    }
  }};
}

caf::behavior sort_source_fn(caf::event_based_actor* self, caf::actor first) {
  return {[=](go_atom) {
    std::uint32_t seed = savina::seed_of();
    for (int i = 0; i < savina::radix_values; ++i) self->send(first, sort_atom::value, savina::radix_value(seed));
  }};
}

void radixsort(benchmark::State& state) {
  caf::actor_system_config cfg;
  auto sys = make_system(cfg);
  const long expected = savina::radix_expected_sum();
  for (auto _ : state) {
    sort_check result;
    savina::join done(1);
    auto finished = done.future();
    std::vector<caf::actor> stages(savina::radix_bits + 1);
    stages[savina::radix_bits] = sys->spawn(sort_stage_fn, savina::radix_bits, caf::actor{}, &result, &done);
    for (int b = savina::radix_bits - 1; b >= 0; --b) stages[b] = sys->spawn(sort_stage_fn, b, stages[b + 1], &result, &done);
    auto src = sys->spawn(sort_source_fn, stages[0]);
    caf::anon_send(src, go_atom::value);
    finished.get();
    check(result.ordered && result.count == savina::radix_values && result.sum == expected, "radixsort order");
    stop_all(stages);
    stop_all({src});
  }
  state.SetItemsProcessed(state.iterations() * long{savina::radix_values} * (savina::radix_bits + 1));
}

} // namespace

int main(int argc, char** argv) {
  return savina::run(argc, argv, {pingpong, counting, threadring, forkjoin, spawn, big, chameneos, fjcreate, spawntree, pipeline,
                                  bndbuffer, logmap, trapezoid, banking, radixsort});
}
