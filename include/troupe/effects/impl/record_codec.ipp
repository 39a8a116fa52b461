#pragma once

// The stored form of an outbox record (troupe/effects/detail/record_codec.hpp):
// with TROUPE_SEPARATE_COMPILATION compiled once (<troupe/effects/impl/src.hpp>);
// header-only, that header includes this file.

#include <troupe/effects/detail/record_codec.hpp>
#include <troupe/persistence/json.hpp>

#include <boost/describe/class.hpp>
#include <boost/describe/enum_from_string.hpp>
#include <boost/describe/enum_to_string.hpp>
#include <boost/json.hpp>

namespace troupe::effects::detail {

struct stored_history_entry {
  std::int64_t t = 0;
  std::string action, result, detail;
};
BOOST_DESCRIBE_STRUCT(stored_history_entry, (), (t, action, result, detail))

struct stored_record {
  std::string type, owner;
  effect_status status = effect_status::pending;
  bool in_doubt = false;
  std::uint32_t attempts = 0, queries = 0, round = 0;
  std::string result, reason;
  std::int64_t created = 0, finished = 0, due = 0;
  std::string request;
  std::vector<stored_history_entry> history;
  std::string reporter;
  bool confirmed = false;
};
BOOST_DESCRIBE_STRUCT(stored_record, (),
                      (type, owner, status, in_doubt, attempts, queries, round, result, reason, created, finished, due,
                       request, history, reporter, confirmed))

/// The stored form as Boost.Describe gives it: the reference that
/// `encode` writes byte for byte, and what it falls back to.
TROUPE_DECL std::string encode_described(const record& r) {
  const auto& i = r.info;
  stored_record s{i.type,   i.owner,      i.status,      i.in_doubt, i.attempts, i.queries, i.round,    i.result,
                  i.reason, i.created_ms, i.finished_ms, r.due_ms,   r.request,  {},        r.reporter, r.confirmed};
  s.history.reserve(i.history.size());
  for (auto& h : i.history) s.history.push_back({h.time_ms, h.action, h.result, h.detail});
  std::string v(1, record_format);
  v += persistence::to_json_text(s);
  return v;
}

/// Reads any stored form, through Boost.Describe: the reference `decode`
/// agrees with, and what it falls back to. Throws `errc::corrupt_record`
/// naming the operation for a record that cannot be read.
TROUPE_DECL record decode_described(std::string_view id, std::string_view v) {
  if (v.empty() || v[0] != record_format)
    throw error(errc::corrupt_record, "outbox record " + std::string(id) + " has an unknown format");
  stored_record s;
  try {
    auto j =
        boost::json::parse(boost::json::string_view(v.data() + 1, v.size() - 1), {}, persistence::json_text_options());
    // Written before records named their reporter: none; before they said
    // whether their outcome was confirmed: a finished one was.
    if (auto* o = j.if_object()) {
      if (!o->contains("reporter")) (*o)["reporter"] = "";
      if (!o->contains("confirmed")) (*o)["confirmed"] = o->contains("status") && (*o)["status"] != "pending";
    }
    s = boost::json::value_to<stored_record>(j);
  } catch (const std::exception& ex) {
    throw error(errc::corrupt_record, "outbox record " + std::string(id) + " cannot be read: " + ex.what());
  }
  record r;
  auto& i = r.info;
  i.id = id;
  i.type = std::move(s.type);
  i.owner = std::move(s.owner);
  i.status = s.status;
  i.in_doubt = s.in_doubt;
  i.attempts = s.attempts;
  i.queries = s.queries;
  i.round = s.round;
  i.result = std::move(s.result);
  i.reason = std::move(s.reason);
  i.created_ms = s.created;
  i.finished_ms = s.finished;
  r.due_ms = s.due;
  r.request = std::move(s.request);
  r.reporter = std::move(s.reporter);
  r.confirmed = s.confirmed;
  i.history.reserve(s.history.size());
  for (auto& h : s.history) i.history.push_back({h.t, std::move(h.action), std::move(h.result), std::move(h.detail)});
  return r;
}

// -- the same text, written and read directly -------------------------------

TROUPE_DECL std::string encode(const record& r) {
  using record_text::append_number;
  using record_text::append_string;
  const auto& i = r.info;
  const char* status = boost::describe::enum_to_string(i.status, nullptr);
  // A status without a name (a number, as Boost.JSON writes it) or a
  // string Boost.JSON cannot hold (which it refuses): as the reference does.
  const auto fits = [&] {
    const auto max = boost::json::string::max_size();
    for (const auto* t : {&i.type, &i.owner, &i.result, &i.reason, &r.request, &r.reporter})
      if (t->size() > max) return false;
    for (const auto& h : i.history)
      if (h.action.size() > max || h.result.size() > max || h.detail.size() > max) return false;
    return true;
  };
  if (!status || !fits()) return encode_described(r);
  std::string v;
  v.reserve(200 + i.type.size() + i.owner.size() + i.result.size() + i.reason.size() + r.request.size() +
            r.reporter.size() + 64 * i.history.size());
  v += record_format;
  const auto text = [&v](const char* member, std::string_view x) {
    v += member;
    append_string(v, x);
  };
  const auto number = [&v](const char* member, std::int64_t x) {
    v += member;
    append_number(v, x);
  };
  text(R"({"type":)", i.type);
  text(R"(,"owner":)", i.owner);
  v += R"(,"status":")";
  v += status;
  v += R"(","in_doubt":)";
  v += i.in_doubt ? "true" : "false";
  number(R"(,"attempts":)", i.attempts);
  number(R"(,"queries":)", i.queries);
  number(R"(,"round":)", i.round);
  text(R"(,"result":)", i.result);
  text(R"(,"reason":)", i.reason);
  number(R"(,"created":)", i.created_ms);
  number(R"(,"finished":)", i.finished_ms);
  number(R"(,"due":)", r.due_ms);
  text(R"(,"request":)", r.request);
  v += R"(,"history":[)";
  for (std::size_t k = 0; k < i.history.size(); ++k) {
    const auto& h = i.history[k];
    number(k == 0 ? R"({"t":)" : R"(,{"t":)", h.time_ms);
    text(R"(,"action":)", h.action);
    text(R"(,"result":)", h.result);
    text(R"(,"detail":)", h.detail);
    v += '}';
  }
  text(R"(],"reporter":)", r.reporter);
  v += R"(,"confirmed":)";
  v += r.confirmed ? "true}" : "false}";
  return v;
}

TROUPE_DECL record decode(std::string_view id, std::string_view v) {
  if (!v.empty() && v[0] == record_format) {
    record r;
    if (record_text::reader(v.substr(1)).record(r)) {
      r.info.id = id;
      return r;
    }
  }
  return decode_described(id, v); // an older form, another shape, or one that throws
}

} // namespace troupe::effects::detail
