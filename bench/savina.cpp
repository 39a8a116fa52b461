// troupe_bench_savina: Savina-style workloads on troupe. Each iteration runs
// a whole workload; items are messages; every workload checks its result.
// The CAF peer (bench/peers/savina_caf.cpp) runs the same workloads.
#include <troupe/troupe.hpp>

#include "savina_common.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

namespace {

using savina::check;

troupe::system_config config() { return troupe::system_config{.threads = savina::threads, .metrics = savina::metrics}; }

// -- pingpong: request/response round trips ------------------------------------

struct ping {
  int n;
};
class pong_actor {
public:
  int handle(ping p) const { return p.n; }
};
struct start_pingpong {
  int rounds;
  std::shared_ptr<std::promise<long>> done;
};
class ping_actor {
public:
  explicit ping_actor(troupe::actor_ref<pong_actor> pong) : pong_(std::move(pong)) {}
  troupe::task<> handle(start_pingpong s) {
    long sum = 0;
    for (int i = 0; i < s.rounds; ++i) sum += co_await pong_.ask(ping{i});
    s.done->set_value(sum);
  }

private:
  troupe::actor_ref<pong_actor> pong_;
};

void pingpong(benchmark::State& state) {
  troupe::actor_system sys(config());
  const int n = savina::pingpong_rounds;
  for (auto _ : state) {
    auto pong = sys.spawn<pong_actor>();
    auto ping = sys.spawn<ping_actor>(pong);
    auto done = std::make_shared<std::promise<long>>();
    auto result = done->get_future();
    ping.tell(start_pingpong{n, done});
    check(result.get() == long{n} * (n - 1) / 2, "pingpong sum");
    ping.stop();
    pong.stop();
  }
  state.SetItemsProcessed(state.iterations() * 2L * n);
}

// -- counting: one producer, one counter ---------------------------------------

struct add {
  long n;
};
struct total {};
class counter {
public:
  void handle(add m) { sum_ += m.n; }
  long handle(total) const { return sum_; }

private:
  long sum_ = 0;
};
struct produce {
  long n;
  std::shared_ptr<std::promise<long>> done;
};
class producer {
public:
  explicit producer(troupe::actor_ref<counter> c) : counter_(std::move(c)) {}
  troupe::task<> handle(produce p) {
    for (long i = 0; i < p.n; ++i) counter_.tell(add{1});
    p.done->set_value(co_await counter_.ask(total{}));
  }

private:
  troupe::actor_ref<counter> counter_;
};

void counting(benchmark::State& state) {
  troupe::actor_system sys(config());
  const long n = savina::counting_messages;
  for (auto _ : state) {
    auto c = sys.spawn<counter>();
    auto p = sys.spawn<producer>(c);
    auto done = std::make_shared<std::promise<long>>();
    auto result = done->get_future();
    p.tell(produce{n, done});
    check(result.get() == n, "counting total");
    c.stop();
    p.stop();
  }
  state.SetItemsProcessed(state.iterations() * (n + 1));
}

// -- threadring: a token passed around a ring -----------------------------------

struct token {
  long remaining;
};
class ring_node;
struct link {
  troupe::actor_ref<ring_node> next;
  std::shared_ptr<std::promise<void>> done;
};
class ring_node {
public:
  void handle(link l) {
    next_ = std::move(l.next);
    done_ = std::move(l.done);
  }
  void handle(token t) {
    if (t.remaining == 0)
      done_->set_value();
    else
      next_.tell(token{t.remaining - 1});
  }

private:
  troupe::actor_ref<ring_node> next_;
  std::shared_ptr<std::promise<void>> done_;
};

void threadring(benchmark::State& state) {
  troupe::actor_system sys(config());
  for (auto _ : state) {
    std::vector<troupe::actor_ref<ring_node>> ring;
    for (int i = 0; i < savina::ring_actors; ++i) ring.push_back(sys.spawn<ring_node>());
    auto done = std::make_shared<std::promise<void>>();
    auto finished = done->get_future();
    for (int i = 0; i < savina::ring_actors; ++i) ring[i].tell(link{ring[(i + 1) % savina::ring_actors], done});
    ring[0].tell(token{savina::ring_hops});
    finished.get();
    for (auto& r : ring) r.stop();
  }
  state.SetItemsProcessed(state.iterations() * (savina::ring_hops + 1));
}

// -- forkjoin: one producer, many workers ---------------------------------------

struct work {
  long v;
};
class fj_worker {
public:
  fj_worker(long expected, std::shared_ptr<savina::join> done) : expected_(expected), done_(std::move(done)) {}
  void handle(work w) {
    sum_ += w.v;
    if (++received_ == expected_) {
      savina::check(sum_ == expected_, "forkjoin sum");
      done_->arrive();
    }
  }

private:
  long expected_;
  std::shared_ptr<savina::join> done_;
  long received_ = 0;
  long sum_ = 0;
};
struct fan_out {
  long each;
};
class fj_producer {
public:
  explicit fj_producer(std::vector<troupe::actor_ref<fj_worker>> workers) : workers_(std::move(workers)) {}
  void handle(fan_out f) {
    for (long i = 0; i < f.each; ++i)
      for (auto& w : workers_) w.tell(work{1});
  }

private:
  std::vector<troupe::actor_ref<fj_worker>> workers_;
};

void forkjoin(benchmark::State& state) {
  troupe::actor_system sys(config());
  const long each = savina::forkjoin_messages_each;
  for (auto _ : state) {
    auto done = std::make_shared<savina::join>(savina::forkjoin_actors);
    auto finished = done->future();
    std::vector<troupe::actor_ref<fj_worker>> workers;
    for (int i = 0; i < savina::forkjoin_actors; ++i) workers.push_back(sys.spawn<fj_worker>(each, done));
    auto p = sys.spawn<fj_producer>(workers);
    p.tell(fan_out{each});
    finished.get();
    for (auto& w : workers) w.stop();
    p.stop();
  }
  state.SetItemsProcessed(state.iterations() * each * savina::forkjoin_actors);
}

// -- spawn: many idle actors, and their memory ----------------------------------

struct noop {};
class idle_actor {
public:
  void handle(noop) {}
};

void spawn(benchmark::State& state) {
  const int n = savina::spawn_actors;
  double bytes_per_actor = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto sys = std::make_unique<troupe::actor_system>(config());
    std::vector<troupe::actor_ref<idle_actor>> refs(n); // resident before the baseline
    const auto before = savina::resident_baseline();
    state.ResumeTiming();
    for (int i = 0; i < n; ++i) refs[i] = sys->spawn<idle_actor>();
    state.PauseTiming();
    bytes_per_actor = std::max(bytes_per_actor, double(savina::resident_bytes() - before) / n);
    check(sys->live_actors() == std::size_t(n), "spawned actors alive");
    refs.clear();
    sys.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["bytes_per_actor"] = bytes_per_actor;
}

// -- big: many actors pinging random peers --------------------------------------

class big_actor;
using big_peers = std::shared_ptr<std::vector<troupe::actor_ref<big_actor>>>;
struct big_start {};
struct big_ping {
  int from;
};
struct big_pong {};
class big_actor {
public:
  big_actor(int index, big_peers peers, std::shared_ptr<savina::join> done)
      : index_(index), peers_(std::move(peers)), done_(std::move(done)), seed_(2463534242u + index) {}
  void handle(big_start) { send_ping(); }
  void handle(big_ping p) { (*peers_)[p.from].tell(big_pong{}); }
  void handle(big_pong) {
    if (++received_ == savina::big_pings_each)
      done_->arrive();
    else
      send_ping();
  }

private:
  void send_ping() {
    auto n = static_cast<std::uint32_t>(peers_->size());
    auto peer = savina::next_random(seed_) % (n - 1);
    if (peer >= static_cast<std::uint32_t>(index_)) ++peer; // never itself
    (*peers_)[peer].tell(big_ping{index_});
  }

  int index_;
  big_peers peers_;
  std::shared_ptr<savina::join> done_;
  std::uint32_t seed_;
  int received_ = 0;
};

void big(benchmark::State& state) {
  troupe::actor_system sys(config());
  for (auto _ : state) {
    auto done = std::make_shared<savina::join>(savina::big_actors);
    auto finished = done->future();
    auto peers = std::make_shared<std::vector<troupe::actor_ref<big_actor>>>();
    for (int i = 0; i < savina::big_actors; ++i) peers->push_back(sys.spawn<big_actor>(i, peers, done));
    for (auto& p : *peers) p.tell(big_start{});
    finished.get();
    for (auto& p : *peers) p.stop();
    peers->clear(); // break the cycle actors -> peers -> actors
  }
  state.SetItemsProcessed(state.iterations() * 2L * savina::big_actors * savina::big_pings_each);
}

// -- chameneos: creatures meeting through a broker ------------------------------

class creature;
struct meet {
  troupe::actor_ref<creature> who;
  savina::colour c;
};
struct met {
  savina::colour other;
};
class broker {
public:
  broker(int meetings, std::shared_ptr<std::promise<int>> done) : meetings_(meetings), done_(std::move(done)) {}
  void handle(meet m); // defined once creature is complete

private:
  int meetings_;
  std::shared_ptr<std::promise<int>> done_;
  std::optional<meet> waiting_;
  int held_ = 0;
};
struct go {};
class creature {
public:
  creature(troupe::context<creature> ctx, troupe::actor_ref<broker> b, savina::colour c)
      : ctx_(ctx), broker_(std::move(b)), colour_(c) {}
  void handle(go) { broker_.tell(meet{ctx_.self(), colour_}); }
  void handle(met m) {
    colour_ = savina::complement(colour_, m.other);
    broker_.tell(meet{ctx_.self(), colour_});
  }

private:
  troupe::context<creature> ctx_;
  troupe::actor_ref<broker> broker_;
  savina::colour colour_;
};

void broker::handle(meet m) {
  if (held_ == meetings_) return; // all meetings done: creatures fade away
  if (!waiting_) {
    waiting_ = std::move(m);
    return;
  }
  waiting_->who.tell(met{m.c});
  m.who.tell(met{waiting_->c});
  waiting_.reset();
  if (++held_ == meetings_) done_->set_value(held_);
}

void chameneos(benchmark::State& state) {
  troupe::actor_system sys(config());
  const int meetings = savina::chameneos_meetings;
  for (auto _ : state) {
    auto done = std::make_shared<std::promise<int>>();
    auto finished = done->get_future();
    auto b = sys.spawn<broker>(meetings, done);
    std::vector<troupe::actor_ref<creature>> creatures;
    for (int i = 0; i < savina::chameneos_creatures; ++i)
      creatures.push_back(sys.spawn<creature>(b, static_cast<savina::colour>(i % 3)));
    for (auto& c : creatures) c.tell(go{});
    check(finished.get() == meetings, "chameneos meetings");
    for (auto& c : creatures) c.stop();
    b.stop();
  }
  state.SetItemsProcessed(state.iterations() * 4L * meetings);
}

// -- fjcreate: spawn an actor, send it one message, it stops ----------------------

struct fj_create_msg {
  savina::join* done;
};
class fj_child {
public:
  explicit fj_child(troupe::context<fj_child> ctx) : ctx_(ctx) {}
  void handle(fj_create_msg m) {
    m.done->arrive();
    ctx_.stop();
  }

private:
  troupe::context<fj_child> ctx_;
};

void fjcreate(benchmark::State& state) {
  troupe::actor_system sys(config());
  const int n = savina::fjcreate_actors;
  for (auto _ : state) {
    savina::join done(n);
    auto finished = done.future();
    for (int i = 0; i < n; ++i) sys.spawn<fj_child>().tell(fj_create_msg{&done});
    finished.get();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// -- spawntree: each node spawns two children, which reply and stop ---------------

class tree_node;
struct grow {
  int depth;
};
struct grown {
  long nodes;
};
struct tree_root {
  std::promise<long>* done;
};
class tree_node {
public:
  tree_node(troupe::context<tree_node> ctx, troupe::actor_ref<tree_node> parent, std::promise<long>* root)
      : ctx_(ctx), parent_(std::move(parent)), root_(root) {}
  void handle(grow g) {
    if (g.depth == 0) return finish(1);
    for (int i = 0; i < 2; ++i) ctx_.system().spawn<tree_node>(ctx_.self(), nullptr).tell(grow{g.depth - 1});
  }
  void handle(grown g) {
    nodes_ += g.nodes;
    if (++replies_ == 2) finish(nodes_ + 1);
  }

private:
  void finish(long nodes) {
    if (root_)
      root_->set_value(nodes);
    else
      parent_.tell(grown{nodes});
    ctx_.stop();
  }

  troupe::context<tree_node> ctx_;
  troupe::actor_ref<tree_node> parent_;
  std::promise<long>* root_;
  long nodes_ = 0;
  int replies_ = 0;
};

void spawntree(benchmark::State& state) {
  troupe::actor_system sys(config());
  const long nodes = (2L << savina::spawntree_depth) - 1;
  for (auto _ : state) {
    std::promise<long> done;
    auto result = done.get_future();
    sys.spawn<tree_node>(troupe::actor_ref<tree_node>{}, &done).tell(grow{savina::spawntree_depth});
    check(result.get() == nodes, "spawntree nodes");
  }
  state.SetItemsProcessed(state.iterations() * 2 * nodes); // a spawn and a message per node
}

// -- pipeline: messages through a chain of stages ---------------------------------

class stage;
struct item {
  long v;
};
struct stage_link {
  troupe::actor_ref<stage> next;
  long expected;
  savina::join* done;
};
class stage {
public:
  void handle(stage_link l) {
    next_ = std::move(l.next);
    expected_ = l.expected;
    done_ = l.done;
  }
  void handle(item i) {
    if (next_) {
      next_.tell(item{i.v + 1});
      return;
    }
    sum_ += i.v;
    if (++received_ == expected_) {
      savina::check(sum_ == expected_ * (savina::pipeline_stages - 1), "pipeline sum");
      done_->arrive();
    }
  }

private:
  troupe::actor_ref<stage> next_;
  long expected_ = 0;
  savina::join* done_ = nullptr;
  long received_ = 0;
  long sum_ = 0;
};
struct feed {
  long n;
};
class source {
public:
  explicit source(troupe::actor_ref<stage> first) : first_(std::move(first)) {}
  void handle(feed f) {
    for (long i = 0; i < f.n; ++i) first_.tell(item{0});
  }

private:
  troupe::actor_ref<stage> first_;
};

void pipeline(benchmark::State& state) {
  troupe::actor_system sys(config());
  const long n = savina::pipeline_messages;
  for (auto _ : state) {
    savina::join done(1);
    auto finished = done.future();
    std::vector<troupe::actor_ref<stage>> stages;
    for (int i = 0; i < savina::pipeline_stages; ++i) stages.push_back(sys.spawn<stage>());
    for (int i = 0; i < savina::pipeline_stages; ++i)
      stages[i].tell(stage_link{i + 1 < savina::pipeline_stages ? stages[i + 1] : troupe::actor_ref<stage>{}, n, &done});
    auto src = sys.spawn<source>(stages[0]);
    src.tell(feed{n});
    finished.get();
    for (auto& s : stages) s.stop();
    src.stop();
  }
  state.SetItemsProcessed(state.iterations() * n * savina::pipeline_stages);
}

// -- bndbuffer: producers and consumers through a manager with a bounded buffer --

class bb_producer;
class bb_consumer;
struct bb_data {
  long v;
  int producer;
};
struct bb_produce {};
struct bb_available {
  int consumer;
  bool consumed; // false for a consumer's first word
  long v;
};
struct bb_item {
  long v;
};
class bb_manager {
public:
  bb_manager(std::shared_ptr<std::vector<troupe::actor_ref<bb_producer>>> producers,
             std::shared_ptr<std::vector<troupe::actor_ref<bb_consumer>>> consumers, std::promise<long>* done)
      : producers_(std::move(producers)), consumers_(std::move(consumers)), done_(done) {}
  void handle(bb_data d);
  void handle(bb_available a);

private:
  std::shared_ptr<std::vector<troupe::actor_ref<bb_producer>>> producers_;
  std::shared_ptr<std::vector<troupe::actor_ref<bb_consumer>>> consumers_;
  std::promise<long>* done_;
  std::deque<long> buffer_;
  std::deque<int> idle_consumers_, waiting_producers_;
  long consumed_ = 0;
  long sum_ = 0;
};
class bb_producer {
public:
  bb_producer(int index, troupe::actor_ref<bb_manager> manager)
      : index_(index), manager_(std::move(manager)), seed_(savina::seed_of(index)) {}
  void handle(bb_produce) {
    if (produced_ == savina::bb_items_each) return;
    ++produced_;
    manager_.tell(bb_data{savina::bb_item(seed_), index_});
  }

private:
  int index_;
  troupe::actor_ref<bb_manager> manager_;
  std::uint32_t seed_;
  int produced_ = 0;
};
class bb_consumer {
public:
  bb_consumer(int index, troupe::actor_ref<bb_manager> manager) : index_(index), manager_(std::move(manager)) {}
  void handle(bb_item i) { manager_.tell(bb_available{index_, true, i.v}); }

private:
  int index_;
  troupe::actor_ref<bb_manager> manager_;
};
void bb_manager::handle(bb_data d) {
  if (!idle_consumers_.empty()) {
    (*consumers_)[idle_consumers_.front()].tell(bb_item{d.v});
    idle_consumers_.pop_front();
  } else {
    buffer_.push_back(d.v);
  }
  if (buffer_.size() < std::size_t(savina::bb_buffer))
    (*producers_)[d.producer].tell(bb_produce{});
  else
    waiting_producers_.push_back(d.producer);
}
void bb_manager::handle(bb_available a) {
  if (a.consumed) {
    sum_ += a.v;
    if (++consumed_ == long{savina::bb_producers} * savina::bb_items_each) done_->set_value(sum_);
  }
  if (buffer_.empty()) {
    idle_consumers_.push_back(a.consumer);
    return;
  }
  (*consumers_)[a.consumer].tell(bb_item{buffer_.front()});
  buffer_.pop_front();
  if (!waiting_producers_.empty()) {
    (*producers_)[waiting_producers_.front()].tell(bb_produce{});
    waiting_producers_.pop_front();
  }
}

void bndbuffer(benchmark::State& state) {
  troupe::actor_system sys(config());
  const long expected = savina::bb_expected_sum();
  for (auto _ : state) {
    std::promise<long> done;
    auto result = done.get_future();
    auto producers = std::make_shared<std::vector<troupe::actor_ref<bb_producer>>>();
    auto consumers = std::make_shared<std::vector<troupe::actor_ref<bb_consumer>>>();
    auto manager = sys.spawn<bb_manager>(producers, consumers, &done);
    for (int i = 0; i < savina::bb_producers; ++i) producers->push_back(sys.spawn<bb_producer>(i, manager));
    for (int i = 0; i < savina::bb_consumers; ++i) consumers->push_back(sys.spawn<bb_consumer>(i, manager));
    for (int i = 0; i < savina::bb_consumers; ++i) manager.tell(bb_available{i, false, 0});
    for (auto& p : *producers) p.tell(bb_produce{});
    check(result.get() == expected, "bndbuffer sum");
    for (auto& p : *producers) p.stop();
    for (auto& c : *consumers) c.stop();
    manager.stop();
  }
  // per item: data, produce (or a wait), item, available
  state.SetItemsProcessed(state.iterations() * 4L * savina::bb_producers * savina::bb_items_each);
}

// -- logmap: series of the logistic map, each term from a rate computer ---------

class lm_series;
struct lm_compute {
  double x;
  troupe::actor_ref<lm_series> to;
};
struct lm_result {
  double x;
};
struct lm_next {};
class lm_computer {
public:
  explicit lm_computer(double rate) : rate_(rate) {}
  void handle(lm_compute c); // once lm_series is complete

private:
  double rate_;
};
class lm_series {
public:
  lm_series(troupe::context<lm_series> ctx, troupe::actor_ref<lm_computer> computer, double* last, savina::join* done)
      : ctx_(ctx), computer_(std::move(computer)), last_(last), done_(done) {}
  // One request to the computer at a time: the next term needs this one.
  void handle(lm_next) {
    if (asking_) {
      ++pending_;
      return;
    }
    asking_ = true;
    computer_.tell(lm_compute{x_, ctx_.self()});
  }
  void handle(lm_result r) {
    x_ = r.x;
    if (++computed_ == savina::logmap_terms) {
      *last_ = x_;
      done_->arrive();
    }
    if (pending_ == 0) {
      asking_ = false;
      return;
    }
    --pending_;
    computer_.tell(lm_compute{x_, ctx_.self()});
  }

private:
  troupe::context<lm_series> ctx_;
  troupe::actor_ref<lm_computer> computer_;
  double* last_;
  savina::join* done_;
  double x_ = 0.5;
  bool asking_ = false;
  int pending_ = 0;
  int computed_ = 0;
};
void lm_computer::handle(lm_compute c) { c.to.tell(lm_result{savina::logistic(rate_, c.x)}); }

struct lm_start {};
class lm_master {
public:
  explicit lm_master(std::vector<troupe::actor_ref<lm_series>> series) : series_(std::move(series)) {}
  void handle(lm_start) {
    for (int t = 0; t < savina::logmap_terms; ++t)
      for (auto& s : series_) s.tell(lm_next{});
  }

private:
  std::vector<troupe::actor_ref<lm_series>> series_;
};

void logmap(benchmark::State& state) {
  troupe::actor_system sys(config());
  for (auto _ : state) {
    std::vector<double> last(savina::logmap_series);
    savina::join done(savina::logmap_series);
    auto finished = done.future();
    std::vector<troupe::actor_ref<lm_computer>> computers;
    std::vector<troupe::actor_ref<lm_series>> series;
    for (int i = 0; i < savina::logmap_series; ++i) {
      computers.push_back(sys.spawn<lm_computer>(savina::logmap_start_rate + i * savina::logmap_rate_step));
      series.push_back(sys.spawn<lm_series>(computers.back(), &last[i], &done));
    }
    auto master = sys.spawn<lm_master>(series);
    master.tell(lm_start{});
    finished.get();
    for (int i = 0; i < savina::logmap_series; ++i) check(last[i] == savina::logmap_expected(i), "logmap term");
    for (auto& c : computers) c.stop();
    for (auto& s : series) s.stop();
    master.stop();
  }
  // per term and series: next, compute, result
  state.SetItemsProcessed(state.iterations() * 3L * savina::logmap_series * savina::logmap_terms);
}

// -- trapezoid: an integral split among workers -----------------------------------

class tz_master;
struct tz_work {
  long first, last;
};
struct tz_area {
  double area;
};
class tz_worker {
public:
  explicit tz_worker(troupe::actor_ref<tz_master> master) : master_(std::move(master)) {}
  void handle(tz_work w);

private:
  troupe::actor_ref<tz_master> master_;
};
class tz_master {
public:
  explicit tz_master(std::promise<double>* done) : done_(done) {}
  void handle(tz_area a) {
    sum_ += a.area;
    if (++received_ == savina::trapezoid_workers) done_->set_value(sum_);
  }

private:
  std::promise<double>* done_;
  double sum_ = 0;
  int received_ = 0;
};
void tz_worker::handle(tz_work w) { master_.tell(tz_area{savina::trapezoid_area(w.first, w.last)}); }

void trapezoid(benchmark::State& state) {
  troupe::actor_system sys(config());
  const long each = savina::trapezoid_pieces / savina::trapezoid_workers;
  for (auto _ : state) {
    std::promise<double> done;
    auto result = done.get_future();
    auto master = sys.spawn<tz_master>(&done);
    std::vector<troupe::actor_ref<tz_worker>> workers;
    for (int i = 0; i < savina::trapezoid_workers; ++i) workers.push_back(sys.spawn<tz_worker>(master));
    for (int i = 0; i < savina::trapezoid_workers; ++i) workers[i].tell(tz_work{i * each, (i + 1) * each});
    check(std::abs(result.get() - savina::trapezoid_exact()) < 1e-6, "trapezoid area");
    for (auto& w : workers) w.stop();
    master.stop();
  }
  state.SetItemsProcessed(state.iterations() * 2L * savina::trapezoid_workers);
}

// -- banking: a teller's transfers between accounts, each acknowledged -------------

class teller;
class account;
using accounts = std::shared_ptr<std::vector<troupe::actor_ref<account>>>;
struct credit {
  long amount;
  int to;
};
struct deposit {
  long amount;
  int from;
};
struct deposited {};
struct transfer_done {};
struct audit {};
class account {
public:
  account(int index, accounts all, troupe::actor_ref<teller> teller, std::atomic<long>* total, savina::join* audited)
      : index_(index), all_(std::move(all)), teller_(std::move(teller)), total_(total), audited_(audited) {}
  void handle(credit c) {
    balance_ -= c.amount;
    (*all_)[c.to].tell(deposit{c.amount, index_});
  }
  void handle(deposit d) {
    balance_ += d.amount;
    (*all_)[d.from].tell(deposited{});
  }
  void handle(deposited);
  void handle(audit) {
    total_->fetch_add(balance_, std::memory_order_relaxed);
    audited_->arrive();
  }

private:
  int index_;
  accounts all_;
  troupe::actor_ref<teller> teller_;
  std::atomic<long>* total_;
  savina::join* audited_;
  long balance_ = savina::banking_initial;
};
struct transfers {
  accounts all;
};
class teller {
public:
  explicit teller(std::promise<void>* done) : done_(done) {}
  void handle(transfers t) {
    std::uint32_t seed = savina::seed_of();
    for (int i = 0; i < savina::banking_transfers; ++i) {
      const auto x = savina::next_transfer(seed);
      (*t.all)[x.from].tell(credit{x.amount, x.to});
    }
  }
  void handle(transfer_done) {
    if (++done_count_ == savina::banking_transfers) done_->set_value();
  }

private:
  std::promise<void>* done_;
  int done_count_ = 0;
};
void account::handle(deposited) { teller_.tell(transfer_done{}); }

void banking(benchmark::State& state) {
  troupe::actor_system sys(config());
  for (auto _ : state) {
    std::promise<void> done;
    auto finished = done.get_future();
    std::atomic<long> total{0};
    savina::join audited(savina::banking_accounts);
    auto audit_done = audited.future();
    auto t = sys.spawn<teller>(&done);
    auto all = std::make_shared<std::vector<troupe::actor_ref<account>>>();
    for (int i = 0; i < savina::banking_accounts; ++i) all->push_back(sys.spawn<account>(i, all, t, &total, &audited));
    t.tell(transfers{all});
    finished.get();
    for (auto& a : *all) a.tell(audit{});
    audit_done.get();
    check(total.load() == long{savina::banking_accounts} * savina::banking_initial, "banking total");
    for (auto& a : *all) a.stop();
    all->clear(); // break the cycle accounts -> all -> accounts
    t.stop();
  }
  // per transfer: credit, deposit, deposited, done
  state.SetItemsProcessed(state.iterations() * 4L * savina::banking_transfers);
}

// -- radixsort: one stage per bit, each holding back the values with its bit set --

class sort_stage;
struct sort_value {
  long v;
};
struct sort_check {
  long count = 0;
  long sum = 0;
  long last = -1;
  bool ordered = true;
};
class sort_stage {
public:
  sort_stage(int bit, troupe::actor_ref<sort_stage> next, sort_check* check, savina::join* done)
      : bit_(bit), next_(std::move(next)), check_(check), done_(done) {}
  void handle(sort_value s) {
    if (!next_) { // the last: checks the order
      check_->ordered = check_->ordered && s.v >= check_->last;
      check_->last = s.v;
      check_->sum += s.v;
      if (++check_->count == savina::radix_values) done_->arrive();
      return;
    }
    if (s.v & (long{1} << bit_))
      held_.push_back(s.v);
    else
      next_.tell(s);
    if (++received_ == savina::radix_values) {
      for (long v : held_) next_.tell(sort_value{v});
      held_.clear();
      received_ = 0;
    }
  }

private:
  int bit_;
  troupe::actor_ref<sort_stage> next_;
  sort_check* check_;
  savina::join* done_;
  std::vector<long> held_;
  long received_ = 0;
};
struct sort_feed {};
class sort_source {
public:
  explicit sort_source(troupe::actor_ref<sort_stage> first) : first_(std::move(first)) {}
  void handle(sort_feed) {
    std::uint32_t seed = savina::seed_of();
    for (int i = 0; i < savina::radix_values; ++i) first_.tell(sort_value{savina::radix_value(seed)});
  }

private:
  troupe::actor_ref<sort_stage> first_;
};

void radixsort(benchmark::State& state) {
  troupe::actor_system sys(config());
  const long expected = savina::radix_expected_sum();
  for (auto _ : state) {
    sort_check result;
    savina::join done(1);
    auto finished = done.future();
    // stages[radix_bits] only checks; stages[b] holds back bit b
    std::vector<troupe::actor_ref<sort_stage>> stages(savina::radix_bits + 1);
    stages[savina::radix_bits] = sys.spawn<sort_stage>(savina::radix_bits, troupe::actor_ref<sort_stage>{}, &result, &done);
    for (int b = savina::radix_bits - 1; b >= 0; --b) stages[b] = sys.spawn<sort_stage>(b, stages[b + 1], &result, &done);
    auto src = sys.spawn<sort_source>(stages[0]);
    src.tell(sort_feed{});
    finished.get();
    check(result.ordered && result.count == savina::radix_values && result.sum == expected, "radixsort order");
    for (auto& s : stages) s.stop();
    src.stop();
  }
  state.SetItemsProcessed(state.iterations() * long{savina::radix_values} * (savina::radix_bits + 1));
}

} // namespace

int main(int argc, char** argv) {
  return savina::run(argc, argv, {pingpong, counting, threadring, forkjoin, spawn, big, chameneos, fjcreate, spawntree, pipeline,
                                  bndbuffer, logmap, trapezoid, banking, radixsort});
}
