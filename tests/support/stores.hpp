#pragma once

// The durable store the layers' tests (delivery, effects, entities) run
// on, chosen by the environment: TROUPE_TEST_STORE unset or "memory", the
// in-memory store; a `postgresql://` connection string, the PostgreSQL
// engine on that server, in a schema of the test's own (ctest runs the
// layers' tests a second time so, as `postgres/<layer>/...`).
//
// A test's "process" (an actor system and its journal, crashed and booted
// again) opens the store with `open_process()`; the test checks what is
// stored through `->`. On PostgreSQL each process is a store of its own
// (its own connections and claims, as a restarted process), and the checks
// go through one more.

#include <troupe/persistence/journal.hpp>
#include <troupe/persistence/memory_store.hpp>
#if defined(TROUPE_TEST_WITH_POSTGRES)
#include <troupe/postgres/store.hpp>
#include <random>
#endif

#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

namespace test {

/// The store the layers' tests run on (see above).
inline std::string store_kind() {
  const char* s = std::getenv("TROUPE_TEST_STORE");
  if (!s || !*s || std::string_view(s) == "memory") return "memory";
  if (std::string_view(s).starts_with("postgresql://")) {
#if defined(TROUPE_TEST_WITH_POSTGRES)
    return "postgres";
#else
    throw std::runtime_error("TROUPE_TEST_STORE names PostgreSQL, and these tests were built without it");
#endif
  }
  throw std::runtime_error(std::string("TROUPE_TEST_STORE is neither memory nor a postgresql:// URI: ") + s);
}

class durable_store {
public:
  durable_store() : kind_(store_kind()) {
    if (kind_ == "memory") {
      memory_ = std::make_shared<troupe::persistence::memory_store>();
      checks_ = std::make_shared<troupe::persistence::journal_of<troupe::persistence::memory_store>>(memory_);
      return;
    }
#if defined(TROUPE_TEST_WITH_POSTGRES)
    std::random_device rd;
    schema_ = "t_" + std::to_string((std::uint64_t{rd()} << 32) | rd());
    checks_ = open_process();
#endif
  }
  durable_store(const durable_store&) = delete;
  durable_store& operator=(const durable_store&) = delete;
  ~durable_store() {
#if defined(TROUPE_TEST_WITH_POSTGRES)
    if (kind_ == "postgres") {
      checks_.reset();
      try {
        troupe::persistence::postgres_store::drop_schema(std::getenv("TROUPE_TEST_STORE"), schema_);
      } catch (...) {
      }
    }
#endif
  }

  /// A journal over the stored data for a new process.
  std::shared_ptr<troupe::persistence::journal> open_process() {
    if (kind_ == "memory")
      return std::make_shared<troupe::persistence::journal_of<troupe::persistence::memory_store>>(memory_);
#if defined(TROUPE_TEST_WITH_POSTGRES)
    troupe::persistence::postgres_options o;
    o.conninfo = std::getenv("TROUPE_TEST_STORE");
    o.schema = schema_;
    return std::make_shared<troupe::persistence::journal_of<troupe::persistence::postgres_store>>(
        std::make_shared<troupe::persistence::postgres_store>(o));
#else
    throw std::logic_error("unreachable");
#endif
  }

  /// The test's own view of the stored data (its tables are its own:
  /// a table handle from here is used only here).
  troupe::persistence::journal* operator->() const { return checks_.get(); }
  troupe::persistence::journal& operator*() const { return *checks_; }

  bool is_memory() const { return kind_ == "memory"; }

private:
  std::string kind_;
  std::string schema_;
  std::shared_ptr<troupe::persistence::memory_store> memory_;
  std::shared_ptr<troupe::persistence::journal> checks_;
};

/// A journal over a durable store of its own (dropped with the journal):
/// for a test with one process that never crashes.
inline std::shared_ptr<troupe::persistence::journal> fresh_journal() {
  struct both {
    durable_store store;
    std::shared_ptr<troupe::persistence::journal> journal = store.open_process();
    ~both() { journal.reset(); } // (before its store)
  };
  auto b = std::make_shared<both>();
  return {b, b->journal.get()};
}

} // namespace test
