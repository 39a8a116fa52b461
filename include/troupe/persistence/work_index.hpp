#pragma once

/// \file
/// `troupe::persistence::work_index`: which persistent entities have
/// unfinished work, kept in the same atomic writes as the work itself (see
/// `resume` in `resume.hpp`).

#include <troupe/error.hpp>
#include <troupe/persistence/journal.hpp>
#include <troupe/persistence/records.hpp>

#include <array>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::persistence {

/// Told to an entity by `resume`; handled by every persistent actor (a
/// layer above may act on it: a reliable actor forgets a mark left behind).
struct resumed {};

/// A table of the entities with work: one key per persistence ID and
/// reason (each reason is set and cleared by one party, so that several may
/// keep one entity marked). A mark goes into the same atomic write as what
/// makes the work (an unconfirmed delivery, an order placed), and is
/// cleared in the write that finishes it; a restart then activates only the
/// marked entities (`resume`), never every one ever made.
///
/// A mark left behind (a clear lost in a crash) only activates its entity
/// once more; a missing mark would leave work undone, so marks are set in
/// the write that makes the work, never after it.
///
/// Reasons: each byte belongs to one party, which claims it
/// (`claim_reason`) before it marks with it: lowercase letters are troupe's
/// layers' (the delivery layer claims its own), applications use any other
/// byte. This layer names none of them.
class work_index {
public:
  static constexpr std::string_view table_name = "work";

  /// Claims the byte `reason` for `owner` (a layer's or an application's
  /// name) in this process. The same owner may claim it again; a byte
  /// another owner holds is refused with `troupe::error`
  /// (`troupe::errc::invalid_argument`, naming both owners), as is an empty
  /// owner. Thread-safe.
  static void claim_reason(char reason, std::string_view owner) {
    if (owner.empty()) throw error(troupe::errc::invalid_argument, "work_index::claim_reason: an empty owner");
    auto& r = reasons();
    std::lock_guard g(r.m);
    auto& held = r.owners[static_cast<unsigned char>(reason)];
    if (held.empty()) {
      held = owner;
    } else if (held != owner) {
      throw error(troupe::errc::invalid_argument, "work_index::claim_reason: reason " + describe(reason) +
                                                      " belongs to " + held + ", not to " + std::string(owner));
    }
  }

  /// Who claimed `reason` in this process (empty: nobody yet).
  static std::string reason_owner(char reason) {
    auto& r = reasons();
    std::lock_guard g(r.m);
    return r.owners[static_cast<unsigned char>(reason)];
  }

  /// The index of the journal's store (its table is created on first use).
  explicit work_index(journal& j) : table_(j.open_table(table_name)) {}
  /// The index in `t` (a table opened as `table_name`).
  explicit work_index(table t) noexcept : table_(t) {}

  /// Marks `pid` as having work for `reason` (a table change for a write).
  table_write mark(std::string_view pid, char reason) const {
    return table_write::put(table_, key(pid, reason), {});
  }

  /// Clears `pid`'s mark for `reason`.
  table_write clear(std::string_view pid, char reason) const { return table_write::erase(table_, key(pid, reason)); }

  /// Blocking (`journal::async_run`): calls `f(pid, reason)` for each mark
  /// of an ID that starts with `prefix`, in key order, until it returns
  /// false.
  std::error_code scan(journal& j, std::string_view prefix,
                       const std::function<bool(std::string_view, char)>& f) const {
    return j.scan(table_, prefix, [&](std::string_view k, std::string_view) {
      if (k.size() < 2 || k[k.size() - 2] != '\0') return true; // not a mark
      return f(k.substr(0, k.size() - 2), k.back());
    });
  }

  /// Blocking: the IDs starting with `prefix` that have a mark for any
  /// reason (each once), or for `reason` only when it is given.
  std::vector<std::string> marked(journal& j, std::string_view prefix, std::optional<char> reason = {}) const {
    std::vector<std::string> out;
    auto ec = scan(j, prefix, [&](std::string_view pid, char r) {
      if (pid.empty() || (reason && r != *reason)) return true; // (an empty ID: the index's own keys)
      if (out.empty() || out.back() != pid) out.emplace_back(pid);
      return true;
    });
    if (ec) throw error(ec, "reading the work index");
    return out;
  }

  /// The index's own key that says a layer's marks for `reason` are
  /// complete in this store (set once it has indexed what it recorded
  /// before the index existed).
  static std::string built_key(char reason) { return key({}, reason); }

  table get_table() const noexcept { return table_; }

private:
  struct reason_registry {
    std::mutex m;
    std::array<std::string, 256> owners;
  };
  static reason_registry& reasons() {
    static reason_registry r;
    return r;
  }
  static std::string describe(char reason) {
    const auto b = static_cast<unsigned char>(reason);
    if (b >= 0x21 && b < 0x7f) return std::string("'") + reason + "'";
    return "byte " + std::to_string(b);
  }

  static std::string key(std::string_view pid, char reason) {
    std::string k;
    k.reserve(pid.size() + 2);
    k.append(pid);
    k.push_back('\0');
    k.push_back(reason);
    return k;
  }

  table table_;
};

} // namespace troupe::persistence
