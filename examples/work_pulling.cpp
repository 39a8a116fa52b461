// work_pulling: a pool where idle workers pull jobs from a master, and the
// master answers each job's asker later, when a worker has finished it.
//
// Shows: answering later (reply_promise), asking from inside an actor
// without blocking it (ctx.ask(...).then), gather.
#include <troupe/troupe.hpp>

#include <cstdio>
#include <deque>
#include <map>
#include <vector>

class master;

/// A job for the pool: the reply (its result) comes when a worker is done.
struct job {
  int n;
  using reply_type = long; // answered later: the message names its reply type
};
/// A worker asks for work; the master answers when it has some.
struct pull {
  using reply_type = job;
};
struct result {
  int n;
  long value;
};
struct stats {};

class master {
public:
  /// Park the asker's promise; hand the job to a waiting worker, if any.
  void handle(job j, troupe::reply_promise<long> asker) {
    askers_.emplace(j.n, std::move(asker));
    if (!idle_.empty()) {
      idle_.front().deliver(j);
      idle_.pop_front();
    } else {
      queued_.push_back(j);
    }
  }
  /// A worker is idle: give it queued work now, or park its pull.
  void handle(pull, troupe::reply_promise<job> worker) {
    if (queued_.empty()) return idle_.push_back(std::move(worker));
    worker.deliver(queued_.front());
    queued_.pop_front();
  }
  /// A result: answer the job's asker, who has waited all along.
  void handle(result r) {
    auto it = askers_.find(r.n);
    if (it == askers_.end()) return;
    it->second.deliver(r.value);
    askers_.erase(it);
  }
  std::size_t handle(stats) const { return askers_.size(); }

private:
  std::deque<job> queued_;
  std::deque<troupe::reply_promise<job>> idle_;
  std::map<int, troupe::reply_promise<long>> askers_;
};

struct begin {};
struct done_query {};

class worker {
public:
  worker(troupe::context<worker> ctx, troupe::actor_ref<master> m) : ctx_(ctx), master_(std::move(m)) {}
  void handle(begin) { pull_next(); }
  int handle(done_query) const { return done_; }

private:
  /// Asks for work without blocking: the continuation is a turn of this
  /// worker, so it may touch done_ safely, and the worker still answers
  /// done_query while it waits.
  void pull_next() {
    ctx_.ask(master_, pull{}).then(
        [this](job j) {
          long v = 0;
          for (int i = 1; i <= j.n; ++i) v += static_cast<long>(i) * i;
          master_.tell(result{j.n, v});
          ++done_;
          pull_next();
        },
        [](const troupe::error&) { /* the master is gone: stop pulling */ });
  }

  troupe::context<worker> ctx_;
  troupe::actor_ref<master> master_;
  int done_ = 0;
};

int main() {
  troupe::actor_system sys;
  auto m = sys.spawn<master>();
  std::vector<troupe::actor_ref<worker>> workers;
  for (int i = 0; i < 4; ++i) {
    workers.push_back(sys.spawn<worker>(m));
    workers.back().tell(begin{});
  }

  // Ask for 100 jobs at once; each reply arrives when a worker finished it.
  std::vector<std::future<long>> replies;
  for (int n = 1; n <= 100; ++n) replies.push_back(m.ask(job{n}, asio::use_future));
  bool ok = true;
  for (int n = 1; n <= 100; ++n) {
    long expect = static_cast<long>(n) * (n + 1) * (2 * n + 1) / 6;
    ok = ok && replies[n - 1].get() == expect;
  }

  // How many did each worker do? One ask to all of them, one deadline.
  auto counts = troupe::gather(workers, done_query{}, std::chrono::seconds(5), asio::use_future).get();
  int total = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    std::printf("worker %zu did %d jobs\n", i, counts[i]);
    total += counts[i];
  }
  std::printf("100 jobs answered %s, %d done by the workers\n", ok ? "correctly" : "WRONGLY", total);
  return ok && total == 100 ? 0 : 1;
}
