// cookbook/transfer: money moves between account entities. A teller's
// transfer enters as a command under its request ID (retried freely: it
// runs once, and every retry gets the first answer); the debited account
// delivers the credit to the other one, which records it and sends an
// e-mail through the outbox. Halfway, the process stops and starts again
// over the same store: `resume` activates the accounts with work in
// flight, and the teller retries every transfer. At the end an offline
// check reads the store's events and finds the money conserved, each
// transfer debited and credited once, each e-mail sent once.
//
//   cookbook_transfer [directory]      (default: a fresh temporary directory)
#include <troupe/troupe.hpp>
#include <troupe/delivery/entities.hpp>
#include <troupe/effects/effectful_actor.hpp>
#include <troupe/persistence/resume.hpp>
#include <troupe/rocksdb/store.hpp>
#include <troupe/testing/email_service.hpp>

#include <boost/describe/class.hpp>

#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <thread>

namespace td = troupe::delivery;
namespace te = troupe::effects;
namespace tk = troupe::testing;
namespace tp = troupe::persistence;
using namespace std::chrono_literals;

// -- messages and events: JSON through Boost.Describe, with stable manifests ----

/// The teller's command: move `amount` to account `to`.
struct transfer {
  static constexpr std::string_view manifest = "bank.transfer";
  std::string to;
  long amount = 0;
};
BOOST_DESCRIBE_STRUCT(transfer, (), (to, amount))

/// Delivered from the debited account to the credited one.
struct credit {
  static constexpr std::string_view manifest = "bank.credit";
  std::string transfer;
  long amount = 0;
};
BOOST_DESCRIBE_STRUCT(credit, (), (transfer, amount))

struct debited {
  static constexpr std::string_view manifest = "bank.debited";
  std::string transfer;
  long amount = 0;
};
BOOST_DESCRIBE_STRUCT(debited, (), (transfer, amount))

struct credited {
  static constexpr std::string_view manifest = "bank.credited";
  std::string transfer;
  long amount = 0;
};
BOOST_DESCRIBE_STRUCT(credited, (), (transfer, amount))

/// The command's answer: stored with its dedup mark, so a retry gets it too.
struct outcome {
  bool done = false;
  long balance = 0;
  friend bool operator==(const outcome&, const outcome&) = default;
};
BOOST_DESCRIBE_STRUCT(outcome, (), (done, balance))

constexpr long opening_balance = 1000;

struct account_state {
  te::effect_table effects; // the e-mails' states, rebuilt from events like the rest
  long balance = opening_balance;
};

struct balance_query {};
struct unsent_mail {};

class account : public te::effectful_actor<account, account_state> {
public:
  using events = tp::event_types<debited, credited>;
  using accepts = td::accepts<transfer, credit>;

  // No delivery options here: every activation gets those the region was given.
  account(troupe::context<account> ctx, troupe::persistence_id id) : effectful_actor(ctx, std::move(id)) {}

  static void apply(account_state& s, const debited& e) { s.balance -= e.amount; }
  static void apply(account_state& s, const credited& e) { s.balance += e.amount; }

  // The command: the debit and the credit's delivery in one atomic write,
  // with the dedup mark and this reply. A refusal is an answer too.
  troupe::task<outcome> handle(td::delivery<transfer> d) {
    if (d.message.amount <= 0 || d.message.amount > state().balance) co_return outcome{false, state().balance};
    // (Named, not temporaries in the co_await: GCC 12 destroys those twice.)
    credit c{d.id.str(), d.message.amount};
    debited e{d.id.str(), d.message.amount};
    co_await deliver(d.message.to, td::delivery_id::of("credit", d.id.str()), c, e);
    co_return outcome{true, state().balance};
  }

  // The credit, once per transfer: the event and the e-mail's outbox record
  // in one write.
  troupe::task<> handle(td::delivery<credit> d) {
    tk::email mail{pid() + "@example.com", "received " + std::to_string(d.message.amount)};
    credited e{d.message.transfer, d.message.amount};
    auto op = "mail:" + d.message.transfer;
    co_await start_effect(std::move(op), mail, e);
  }

  long handle(balance_query) const { return state().balance; }

  /// E-mails not yet known to be sent (pending, or an unknown outcome).
  std::size_t handle(unsent_mail) const {
    std::size_t n = 0;
    for (const auto& [id, e] : state().effects) n += e.status != te::effect_status::completed;
    return n;
  }
};

// -- one process over the store ------------------------------------------------

struct bank {
  std::shared_ptr<tp::journal_of<tp::rocksdb_store>> journal;
  troupe::actor_system sys;
  troupe::entity_region<account> accounts;

  bank(const std::filesystem::path& dir, std::shared_ptr<tk::email_service> mail)
      : journal(std::make_shared<tp::journal_of<tp::rocksdb_store>>(std::make_shared<tp::rocksdb_store>(dir.string()))),
        accounts(open(sys, journal, std::move(mail))) {
    // The accounts with work in flight (an unconfirmed credit, a pending
    // e-mail) are activated now, not when someone happens to ask them.
    const auto resumed = tp::resume(*journal, accounts, "account-", asio::use_future).get();
    std::cout << "  resumed " << resumed << " account(s) with work in flight\n";
  }

  static troupe::entity_region<account> open(troupe::actor_system& sys,
                                             const std::shared_ptr<tp::journal_of<tp::rocksdb_store>>& journal,
                                             std::shared_ptr<tk::email_service> mail) {
    tp::set_journal(sys, journal);
    td::set_transport(sys);
    te::retry_policy retries;
    retries.max_attempts = 50;
    retries.initial_backoff = 5ms;
    retries.max_backoff = 50ms;
    te::adapters adapters;
    adapters.add("email", tk::email_adapter(std::move(mail)), retries);
    te::dispatcher_options dispatch;
    dispatch.tick = 5ms;
    te::spawn_dispatcher(sys, std::move(adapters), dispatch);
    td::delivery_options o;
    o.redelivery.initial_backoff = 10ms;
    o.redelivery.max_backoff = 100ms;
    return td::entities<account>(sys, "account-", o, troupe::entity_options{.idle_timeout = 50ms});
  }

  /// The teller: asks the command, and retries it (under the same ID) until
  /// it is answered.
  outcome ask_transfer(const std::string& id, const std::string& from, const std::string& to, long amount) {
    for (;;) {
      try {
        return accounts.get(from)
            .ask(td::command<transfer>{td::delivery_id(id), transfer{to, amount}, "teller"}, asio::use_future)
            .get();
      } catch (const troupe::error& e) {
        std::cout << "  " << id << ": " << e.what() << "; retrying\n";
        std::this_thread::sleep_for(10ms);
      }
    }
  }

  /// Until every credit is confirmed and every e-mail sent.
  void settle(const std::vector<std::string>& names) {
    for (;;) {
      bool idle = true;
      for (const auto& n : names) {
        auto ref = accounts.get(n);
        idle = idle && ref.ask(td::delivery_status{}, asio::use_future).get().unconfirmed == 0 &&
               ref.ask(unsent_mail{}, asio::use_future).get() == 0;
      }
      if (idle) return;
      std::this_thread::sleep_for(10ms);
    }
  }
};

int main(int argc, char** argv) {
  std::random_device rd;
  const auto dir = argc > 1 ? std::filesystem::path(argv[1])
                            : std::filesystem::temp_directory_path() / ("troupe-transfer-" + std::to_string(rd()));
  tk::simulator_options mo;
  mo.seed = 7;
  mo.faults = {.fail_before = 0.2, .lose_response = 0.3}; // the mail service fails, and loses answers
  auto mail = std::make_shared<tk::email_service>(mo);

  const std::vector<std::string> names{"account-a", "account-b", "account-c", "account-d"};
  const int transfers = 40;
  auto id_of = [](int i) { return "transfer-" + std::to_string(i); };
  std::map<std::string, outcome> answered;
  std::cout << "first process:\n";
  {
    bank b(dir, mail);
    for (int i = 0; i < transfers / 2; ++i)
      answered[id_of(i)] = b.ask_transfer(id_of(i), names[i % 4], names[(i + 1) % 4], 10 + i);
    std::cout << "  " << answered.size() << " transfers answered; stopping with credits and e-mails in flight\n";
  } // the process goes, with whatever it had in flight
  std::cout << "second process:\n";
  bool ok = true;
  {
    bank b(dir, mail);
    // The teller does not know which answers got through: it asks them all
    // again. Those answered before are answered the same, and run no more.
    for (int i = 0; i < transfers; ++i) {
      auto o = b.ask_transfer(id_of(i), names[i % 4], names[(i + 1) % 4], 10 + i);
      if (auto it = answered.find(id_of(i)); it != answered.end() && !(it->second == o)) {
        std::cout << "  FAILED: " << id_of(i) << " was answered differently on its retry\n";
        ok = false;
      }
      answered[id_of(i)] = o;
    }
    b.settle(names);
    long total = 0;
    for (const auto& n : names) total += b.accounts.get(n).ask(balance_query{}, asio::use_future).get();
    std::cout << "  every credit confirmed and every e-mail sent; the balances sum to " << total << "\n";
  }

  // -- offline: the store read without actors --------------------------------
  std::map<std::string, int> debits, credits;
  long total = 0;
  {
    tp::rocksdb_store store(dir.string());
    for (const auto& n : names) {
      long balance = opening_balance;
      auto ec = store.replay(n, 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& r) {
        if (r.manifest == debited::manifest) {
          auto e = tp::from_json_text<debited>(r.payload);
          balance -= e.amount;
          ++debits[e.transfer];
        } else if (r.manifest == credited::manifest) {
          auto e = tp::from_json_text<credited>(r.payload);
          balance += e.amount;
          ++credits[e.transfer];
        }
      });
      if (ec) {
        std::cout << "FAILED: reading " << n << ": " << ec.message() << "\n";
        return 1;
      }
      std::cout << "  " << n << ": " << balance << "\n";
      total += balance;
    }
  }
  for (int i = 0; i < transfers; ++i) {
    const auto id = id_of(i);
    const int d = debits[id], c = credits[id], sent = static_cast<int>(mail->deliveries("mail:" + id));
    const int expected = answered[id].done ? 1 : 0;
    if (d != expected || c != expected || sent != expected) {
      std::cout << "  FAILED: " << id << " debited " << d << "x, credited " << c << "x, e-mailed " << sent << "x\n";
      ok = false;
    }
  }
  ok = ok && total == opening_balance * static_cast<long>(names.size());
  std::cout << (ok ? "offline check: money conserved; each transfer debited, credited and e-mailed once\n"
                   : "FAILED: the offline check\n");
  if (argc <= 1) std::filesystem::remove_all(dir);
  return ok ? 0 : 1;
}
