#pragma once

// The bodies of <troupe/metrics.hpp>'s snapshot and registry.

#include <troupe/metrics.hpp>
#include <troupe/detail/number_text.hpp>

#include <cmath>

namespace troupe {

namespace detail {

inline bool metric_name_ok(std::string_view n) noexcept {
  if (n.empty()) return false;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

inline bool label_name_ok(std::string_view n) noexcept {
  if (n.empty() || n.starts_with("__")) return false;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

inline void check_metric(std::string_view name, metric_type type, const metric_labels& labels) {
  if (!metric_name_ok(name))
    throw error(errc::invalid_argument, "metric name \"" + std::string(name) + "\" is not [a-zA-Z_:][a-zA-Z0-9_:]*");
  for (const auto& [k, v] : labels) {
    if (!label_name_ok(k))
      throw error(errc::invalid_argument, "label name \"" + k + "\" of metric " + std::string(name) +
                                              " is not [a-zA-Z_][a-zA-Z0-9_]* (nor starts with __)");
    if (type == metric_type::histogram && k == "le")
      throw error(errc::invalid_argument, "histogram " + std::string(name) + " cannot have a label named le");
  }
}

inline void append_number(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  append_finite_number(out, v);
}

inline void append_escaped(std::string& out, std::string_view s, bool quote) {
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (quote && c == '"')
      out += "\\\"";
    else
      out += c;
  }
}

inline void append_labels(std::string& out, const metric_labels& labels, const char* le = nullptr, double bound = 0) {
  if (labels.empty() && !le) return;
  out += '{';
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ',';
    first = false;
    out += k;
    out += "=\"";
    append_escaped(out, v, true);
    out += '"';
  }
  if (le) {
    if (!first) out += ',';
    out += "le=\"";
    if (*le)
      out += le;
    else
      append_number(out, bound);
    out += '"';
  }
  out += '}';
}

inline const char* type_word(metric_type t) noexcept {
  switch (t) {
  case metric_type::counter: return "counter";
  case metric_type::gauge: return "gauge";
  case metric_type::histogram: return "histogram";
  }
  return "untyped";
}

} // namespace detail

TROUPE_DECL const metric_family* metrics_snapshot::find(std::string_view name) const noexcept {
  for (const auto& f : families_)
    if (f.name == name) return &f;
  return nullptr;
}

TROUPE_DECL const metric_sample* metrics_snapshot::sample(std::string_view name,
                                                          const metric_labels& labels) const noexcept {
  const auto* f = find(name);
  if (!f) return nullptr;
  for (const auto& s : f->samples)
    if (s.labels == labels) return &s;
  return nullptr;
}

TROUPE_DECL std::optional<double> metrics_snapshot::value(std::string_view name,
                                                          const metric_labels& labels) const noexcept {
  const auto* s = sample(name, labels);
  if (!s) return std::nullopt;
  return s->value;
}

TROUPE_DECL double metrics_snapshot::total(std::string_view name) const noexcept {
  const auto* f = find(name);
  if (!f) return 0;
  double t = 0;
  for (const auto& s : f->samples) t += f->type == metric_type::histogram ? static_cast<double>(s.count) : s.value;
  return t;
}

TROUPE_DECL void metrics_snapshot::add(std::string_view name, std::string_view help, metric_type type,
                                       metric_sample sample) {
  detail::check_metric(name, type, sample.labels);
  for (auto& f : families_) {
    if (f.name != name) continue;
    if (f.type != type)
      throw error(errc::invalid_argument, "metric " + std::string(name) + " is a " + detail::type_word(f.type) +
                                              ", not a " + detail::type_word(type));
    f.samples.push_back(std::move(sample));
    return;
  }
  families_.push_back(metric_family{std::string(name), std::string(help), type, {}});
  families_.back().samples.push_back(std::move(sample));
}

TROUPE_DECL std::string metrics_snapshot::prometheus() const {
  std::string out;
  out.reserve(families_.size() * 160);
  for (const auto& f : families_) {
    out += "# HELP ";
    out += f.name;
    out += ' ';
    detail::append_escaped(out, f.help, false);
    out += "\n# TYPE ";
    out += f.name;
    out += ' ';
    out += detail::type_word(f.type);
    out += '\n';
    for (const auto& s : f.samples) {
      if (f.type != metric_type::histogram) {
        out += f.name;
        detail::append_labels(out, s.labels);
        out += ' ';
        detail::append_number(out, s.value);
        out += '\n';
        continue;
      }
      for (std::size_t i = 0; i < s.cumulative.size(); ++i) {
        out += f.name;
        out += "_bucket";
        const bool last = i >= s.bounds.size();
        detail::append_labels(out, s.labels, last ? "+Inf" : "", last ? 0 : s.bounds[i]);
        out += ' ';
        detail::append_number(out, static_cast<double>(s.cumulative[i]));
        out += '\n';
      }
      out += f.name;
      out += "_sum";
      detail::append_labels(out, s.labels);
      out += ' ';
      detail::append_number(out, s.sum);
      out += '\n';
      out += f.name;
      out += "_count";
      detail::append_labels(out, s.labels);
      out += ' ';
      detail::append_number(out, static_cast<double>(s.count));
      out += '\n';
    }
  }
  return out;
}

TROUPE_DECL metrics_registry::entry& metrics_registry::find_or_make(std::string_view name, std::string_view help,
                                                                    metric_type type, metric_labels& labels,
                                                                    const std::vector<double>* bounds) {
  detail::check_metric(name, type, labels);
  if (bounds) {
    for (std::size_t i = 0; i < bounds->size(); ++i)
      if (!std::isfinite((*bounds)[i]) || (i > 0 && (*bounds)[i] <= (*bounds)[i - 1]))
        throw error(errc::invalid_argument,
                    "bounds of histogram " + std::string(name) + " must be finite and increasing");
  }
  std::lock_guard g(mutex_);
  for (auto& e : entries_) {
    if (e.name != name) continue;
    if (e.type != type)
      throw error(errc::invalid_argument, "metric " + std::string(name) + " is a " + detail::type_word(e.type) +
                                              ", not a " + detail::type_word(type));
    if (e.help != help)
      throw error(errc::invalid_argument, "metric " + std::string(name) + " was made with another help text");
    if (bounds && e.h->bounds() != *bounds)
      throw error(errc::invalid_argument, "histogram " + std::string(name) + " was made with other bounds");
    if (e.labels == labels) return e;
  }
  entry& e = entries_.emplace_back(entry{std::string(name), std::string(help), type, std::move(labels), {}, {}, {}});
  switch (type) {
  case metric_type::counter: e.c = std::make_unique<counter>(); break;
  case metric_type::gauge: e.g = std::make_unique<gauge>(); break;
  case metric_type::histogram: e.h = std::make_unique<histogram>(*bounds); break;
  }
  return e;
}

TROUPE_DECL counter& metrics_registry::make_counter(std::string_view name, std::string_view help,
                                                    metric_labels labels) {
  return *find_or_make(name, help, metric_type::counter, labels, nullptr).c;
}

TROUPE_DECL gauge& metrics_registry::make_gauge(std::string_view name, std::string_view help, metric_labels labels) {
  return *find_or_make(name, help, metric_type::gauge, labels, nullptr).g;
}

TROUPE_DECL histogram& metrics_registry::make_histogram(std::string_view name, std::string_view help,
                                                        std::vector<double> bounds, metric_labels labels) {
  return *find_or_make(name, help, metric_type::histogram, labels, &bounds).h;
}

TROUPE_DECL metrics_registry::collector_handle
metrics_registry::add_collector(std::function<void(metrics_snapshot&)> collect) {
  std::lock_guard g(mutex_);
  collectors_.push_back(std::move(collect));
  return collector_handle(this, std::prev(collectors_.end()));
}

TROUPE_DECL void metrics_registry::remove_collector(collector_handle::iterator it) noexcept {
  std::lock_guard g(mutex_);
  collectors_.erase(it);
}

TROUPE_DECL metrics_snapshot metrics_registry::snapshot() const {
  metrics_snapshot s;
  std::lock_guard g(mutex_);
  for (const auto& e : entries_) {
    metric_sample m;
    m.labels = e.labels;
    switch (e.type) {
    case metric_type::counter: m.value = static_cast<double>(e.c->value()); break;
    case metric_type::gauge: m.value = static_cast<double>(e.g->value()); break;
    case metric_type::histogram: m = e.h->sample(e.labels); break;
    }
    s.add(e.name, e.help, e.type, std::move(m));
  }
  for (const auto& c : collectors_) c(s);
  return s;
}

} // namespace troupe
