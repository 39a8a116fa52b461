// handshake: a two-step protocol written as one coroutine over the actor's
// own mailbox (context::receive), with a deadline for the last step.
//
// The client sends hello and waits for the server's challenge; it answers
// it and waits for welcome or reject, for at most a second. Messages of
// other types that arrive meanwhile stay queued, in order, and the
// handlers take them once the coroutine has finished.
#include <troupe/troupe.hpp>

#include <cstdio>
#include <string>
#include <variant>

class client;
class server;

struct hello {
  troupe::actor_ref<client> from;
};
struct challenge {
  int nonce;
};
struct answer {
  int value;
};
struct welcome {
  std::string session;
};
struct reject {
  std::string why;
};
struct chat {
  std::string text;
};
struct log_query {};

class server {
public:
  void handle(hello h) {
    client_ = h.from;
    nonce_ = 1234;
    send_challenge();
  }
  void handle(answer a);

private:
  void send_challenge();
  troupe::actor_ref<client> client_;
  int nonce_ = 0;
};

class client {
public:
  client(troupe::context<client> ctx, troupe::actor_ref<server> s) : ctx_(ctx), server_(std::move(s)) {}

  /// The whole handshake, in order, as one coroutine.
  troupe::task<void> on_start() {
    server_.tell(hello{ctx_.self()});
    auto c = co_await ctx_.receive<challenge>();
    log_ += "challenged; ";
    server_.tell(answer{c.nonce * 2});
    try {
      auto outcome = co_await ctx_.receive<welcome, reject>(std::chrono::seconds(1));
      if (auto* w = std::get_if<welcome>(&outcome))
        log_ += "welcome to " + w->session + "; ";
      else
        log_ += "rejected: " + std::get<reject>(outcome).why + "; ";
    } catch (const troupe::error& e) {
      if (e.code() != troupe::errc::receive_timeout) throw;
      log_ += "no answer; ";
    }
  }

  // After the handshake the handlers take over (chat sent early waited).
  void handle(chat c) { log_ += "chat: " + c.text + "; "; }
  void handle(challenge) {}
  void handle(welcome) {}
  void handle(reject) {}
  std::string handle(log_query) const { return log_; }

private:
  troupe::context<client> ctx_;
  troupe::actor_ref<server> server_;
  std::string log_;
};

void server::send_challenge() { client_.tell(challenge{nonce_}); }
void server::handle(answer a) {
  if (a.value == nonce_ * 2) {
    client_.tell(chat{"first message after the handshake"});
    client_.tell(welcome{"s-1"}); // sent after the chat: the receive takes it first anyway
  } else {
    client_.tell(reject{"wrong answer"});
  }
}

int main() {
  troupe::actor_system sys;
  auto s = sys.spawn<server>();
  auto c = sys.spawn<client>(s);
  // An ask is handled once the handshake has finished (the coroutine holds
  // the mailbox until then); by then the chat sent before welcome is queued,
  // so a second ask sees it handled.
  c.ask(log_query{}, asio::use_future).get();
  std::string log = c.ask(log_query{}, asio::use_future).get();
  std::printf("%s\n", log.c_str());
  return log == "challenged; welcome to s-1; chat: first message after the handshake; " ? 0 : 1;
}
