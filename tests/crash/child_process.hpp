#pragma once

// Crash tests' children: run a program that reports "<id> <number>" lines
// on its standard output, for a while, then kill it with SIGKILL.

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace test {

/// What the child reported (the highest number per ID) and how it ended.
struct child_run {
  std::map<std::string, std::uint64_t> acked;
  int status = 0; // waitpid's
  bool killed() const { return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL; }
};

/// Runs `argv` for `run_for`, collecting its lines; then kill -9, and
/// collects what was still in the pipe.
inline child_run run_and_kill(const std::vector<std::string>& argv, std::chrono::milliseconds run_for) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  child_run out;
  std::string buffer;
  auto consume = [&](bool until_eof) {
    char chunk[4096];
    for (;;) {
      auto n = read(fds[0], chunk, sizeof chunk);
      if (n <= 0) return;
      buffer.append(chunk, static_cast<std::size_t>(n));
      std::size_t nl;
      while ((nl = buffer.find('\n')) != std::string::npos) {
        std::istringstream line(buffer.substr(0, nl));
        buffer.erase(0, nl + 1);
        std::string id;
        std::uint64_t seq;
        if (line >> id >> seq) out.acked[id] = std::max(out.acked[id], seq);
      }
      if (!until_eof) return;
    }
  };
  const auto deadline = std::chrono::steady_clock::now() + run_for;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) > 0) consume(false);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &out.status, 0);
  consume(true); // whatever the child wrote before it died
  close(fds[0]);
  return out;
}

} // namespace test
