#pragma once

/// \file
/// Metrics: counters, gauges and histograms with fixed buckets, kept by an
/// actor system (`actor_system::metrics_registry()`), read as a snapshot
/// (`actor_system::metrics()`) or in Prometheus' text format
/// (`metrics_snapshot::prometheus()`; served over HTTP by
/// `<troupe/observe/endpoint.hpp>`).
///
/// A metric is made once (by name and labels: making it again returns the
/// same object) and updated without a lock: a counter or gauge is one
/// relaxed atomic, a histogram one per bucket plus its sum. What costs too
/// much to keep up to date on every message (the actors' mailboxes, say) is
/// read when a snapshot is taken, by a collector the layer registered.

#include <troupe/error.hpp>
#include <troupe/detail/compile_mode.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe {

/// Label names and values of one metric, in the order given.
using metric_labels = std::vector<std::pair<std::string, std::string>>;

struct metric_sample;

/// What a metric family is, as Prometheus names it.
enum class metric_type : std::uint8_t { counter, gauge, histogram };

/// A count that only goes up.
class counter {
public:
  void add(std::uint64_t n = 1) noexcept { v_.fetch_add(n, std::memory_order_relaxed); }
  std::uint64_t value() const noexcept { return v_.load(std::memory_order_relaxed); }

private:
  std::atomic<std::uint64_t> v_{0};
};

/// A value that goes up and down.
class gauge {
public:
  void set(std::int64_t v) noexcept { v_.store(v, std::memory_order_relaxed); }
  void add(std::int64_t n = 1) noexcept { v_.fetch_add(n, std::memory_order_relaxed); }
  void sub(std::int64_t n = 1) noexcept { v_.fetch_sub(n, std::memory_order_relaxed); }
  std::int64_t value() const noexcept { return v_.load(std::memory_order_relaxed); }

private:
  std::atomic<std::int64_t> v_{0};
};

/// Observations counted in buckets with fixed upper bounds (plus one for
/// everything above the last), with their sum.
class histogram {
public:
  /// `bounds`: the buckets' upper bounds, increasing (checked by the
  /// registry).
  explicit histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), buckets_(new std::atomic<std::uint64_t>[bounds_.size() + 1]) {
    for (std::size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
  }

  void observe(double v) noexcept {
    std::size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    buckets_[i].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(v, std::memory_order_relaxed);
  }

  const std::vector<double>& bounds() const noexcept { return bounds_; }
  /// The count of bucket `i` alone (not cumulative); `bounds().size()` is
  /// the one above the last bound.
  std::uint64_t bucket(std::size_t i) const noexcept { return buckets_[i].load(std::memory_order_relaxed); }
  double sum() const noexcept { return sum_.load(std::memory_order_relaxed); }
  /// What it holds now, as a snapshot's sample with `labels`.
  metric_sample sample(metric_labels labels = {}) const;

  /// Bounds for durations in seconds: 50 µs to 10 s.
  static std::vector<double> seconds_buckets() {
    return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  }
  /// Bounds for sizes (records in a group, say): 1 to 4096, powers of two.
  static std::vector<double> size_buckets() { return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}; }

private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> buckets_;
  std::atomic<double> sum_{0};
};

/// One metric of a family: its labels and its value (a counter's or a
/// gauge's), or its buckets (a histogram's).
struct metric_sample {
  metric_labels labels;
  double value = 0;
  /// A histogram's: the upper bounds, without the last (+Inf) ...
  std::vector<double> bounds;
  /// ... and the cumulative counts, one per bound, then the count of all.
  std::vector<std::uint64_t> cumulative;
  double sum = 0;
  std::uint64_t count = 0;
};

inline metric_sample histogram::sample(metric_labels labels) const {
  metric_sample m;
  m.labels = std::move(labels);
  m.bounds = bounds_;
  m.cumulative.resize(bounds_.size() + 1);
  std::uint64_t running = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) m.cumulative[i] = running += bucket(i);
  m.count = running;
  m.sum = sum();
  return m;
}

struct metric_family {
  std::string name;
  std::string help;
  metric_type type = metric_type::counter;
  std::vector<metric_sample> samples;
};

/// Every metric of an actor system at one moment (each read on its own:
/// counts from different threads are not taken at one instant).
class metrics_snapshot {
public:
  const std::vector<metric_family>& families() const noexcept { return families_; }
  /// The family named `name`, or null.
  TROUPE_DECL const metric_family* find(std::string_view name) const noexcept;
  /// The sample of `name` with exactly these labels, or null.
  TROUPE_DECL const metric_sample* sample(std::string_view name, const metric_labels& labels = {}) const noexcept;
  /// The value of a counter or gauge with exactly these labels, or nothing.
  TROUPE_DECL std::optional<double> value(std::string_view name, const metric_labels& labels = {}) const noexcept;
  /// The values of a counter or gauge summed over every label set (0 when
  /// there is no such family).
  TROUPE_DECL double total(std::string_view name) const noexcept;

  /// Adds a sample to the family `name` (made if new). Throws
  /// `errc::invalid_argument` for a malformed name or label name, or a
  /// family already there with another type.
  TROUPE_DECL void add(std::string_view name, std::string_view help, metric_type type, metric_sample sample);
  void add_counter(std::string_view name, std::string_view help, double v, metric_labels labels = {}) {
    add(name, help, metric_type::counter, metric_sample{std::move(labels), v, {}, {}, 0, 0});
  }
  void add_gauge(std::string_view name, std::string_view help, double v, metric_labels labels = {}) {
    add(name, help, metric_type::gauge, metric_sample{std::move(labels), v, {}, {}, 0, 0});
  }

  /// Prometheus' text exposition format, version 0.0.4 (`# HELP`, `# TYPE`,
  /// a histogram's `_bucket{le=...}` up to `+Inf`, `_sum`, `_count`).
  TROUPE_DECL std::string prometheus() const;

private:
  std::vector<metric_family> families_;
};

/// The metrics of one actor system. Thread-safe.
class metrics_registry {
public:
  metrics_registry() = default;
  metrics_registry(const metrics_registry&) = delete;
  metrics_registry& operator=(const metrics_registry&) = delete;

  /// The counter `name` with `labels`, made on the first call (the same
  /// object on later calls; it lives as long as the registry). Throws
  /// `errc::invalid_argument` for a malformed name, or a name already used
  /// by another type of metric or with another help text.
  TROUPE_DECL counter& make_counter(std::string_view name, std::string_view help, metric_labels labels = {});
  TROUPE_DECL gauge& make_gauge(std::string_view name, std::string_view help, metric_labels labels = {});
  /// As `make_counter`; `bounds` must increase and be finite (the same
  /// bounds for every label set of the name).
  TROUPE_DECL histogram& make_histogram(std::string_view name, std::string_view help, std::vector<double> bounds,
                                        metric_labels labels = {});

  /// Unregisters its collector when destroyed (waiting for a snapshot that
  /// is running it).
  class collector_handle {
  public:
    collector_handle() = default;
    collector_handle(collector_handle&& o) noexcept : registry_(std::exchange(o.registry_, nullptr)), it_(o.it_) {}
    collector_handle& operator=(collector_handle&& o) noexcept {
      if (this != &o) {
        reset();
        registry_ = std::exchange(o.registry_, nullptr);
        it_ = o.it_;
      }
      return *this;
    }
    ~collector_handle() { reset(); }
    void reset() noexcept {
      if (auto* r = std::exchange(registry_, nullptr)) r->remove_collector(it_);
    }

  private:
    friend class metrics_registry;
    using iterator = std::list<std::function<void(metrics_snapshot&)>>::iterator;
    collector_handle(metrics_registry* r, iterator it) : registry_(r), it_(it) {}
    metrics_registry* registry_ = nullptr;
    iterator it_{};
  };

  /// Runs `collect` whenever a snapshot is taken, to add what it reads then
  /// (`metrics_snapshot::add_gauge`, ...). It runs under the registry's
  /// lock: it must not make metrics or collectors.
  [[nodiscard]] TROUPE_DECL collector_handle add_collector(std::function<void(metrics_snapshot&)> collect);

  /// Every metric now, collectors' included.
  TROUPE_DECL metrics_snapshot snapshot() const;

private:
  struct entry {
    std::string name;
    std::string help;
    metric_type type;
    metric_labels labels;
    std::unique_ptr<counter> c;
    std::unique_ptr<gauge> g;
    std::unique_ptr<histogram> h;
  };
  TROUPE_DECL entry& find_or_make(std::string_view name, std::string_view help, metric_type type, metric_labels& labels,
                                  const std::vector<double>* bounds);
  TROUPE_DECL void remove_collector(collector_handle::iterator it) noexcept;

  mutable std::mutex mutex_;
  std::list<entry> entries_;
  mutable std::list<std::function<void(metrics_snapshot&)>> collectors_;
};

} // namespace troupe

#if defined(TROUPE_HEADER_ONLY)
#include <troupe/impl/metrics.ipp>
#endif
