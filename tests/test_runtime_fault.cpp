// Faults: when one rank is killed mid-run every other rank exits non-zero within the
// configured timeout, naming the failed peer; nothing hangs. Configurations the runtime
// rejects fail before any rank starts.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "tests/runtime_helpers.h"

namespace stagecraft::test {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kTimeoutS = 4;

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// Ranks started as torchrun would: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
struct Ranks {
  std::vector<pid_t> pids;
  std::vector<std::string> out, err;
  std::vector<int> status;
  ~Ranks() {  // never leave a rank behind, whatever the test did
    for (pid_t p : pids)
      if (p > 0) {
        ::kill(p, SIGKILL);
        ::waitpid(p, nullptr, 0);
      }
  }
};

void start(Ranks& R, int world, const std::string& args) {
  int port = free_port();
  for (int r = 0; r < world; ++r) {
    R.out.push_back(temp_path("rank" + std::to_string(r) + ".out"));
    R.err.push_back(temp_path("rank" + std::to_string(r) + ".err"));
    R.status.push_back(-1);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      std::string cmd = std::string("exec ") + STAGECRAFT_BIN + " train " + args + " >" + R.out.back() + " 2>" + R.err.back();
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    R.pids.push_back(pid);
  }
}

bool wait_for_text(const std::string& path, const std::string& text, double seconds) {
  auto end = Clock::now() + std::chrono::milliseconds(static_cast<long>(seconds * 1000));
  while (Clock::now() < end) {
    if (read_text(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Waits for every rank but `victim`; returns the seconds the last one took.
double reap(Ranks& R, int victim, double limit_s) {
  auto t0 = Clock::now();
  size_t left = R.pids.size() - 1;
  while (left > 0 && std::chrono::duration<double>(Clock::now() - t0).count() < limit_s) {
    for (size_t r = 0; r < R.pids.size(); ++r) {
      if (static_cast<int>(r) == victim || R.pids[r] <= 0) continue;
      int st = 0;
      if (::waitpid(R.pids[r], &st, WNOHANG) == R.pids[r]) {
        R.status[r] = st;
        R.pids[r] = -1;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void kill_mid_run(int victim) {
  Ranks R;
  const int world = 4;
  start(R, world, "--model tiny --pp 4 --microbatches 8 --schedule 1f1b --steps 100000 --timeout " +
                      std::to_string(kTimeoutS));
  ASSERT_TRUE(wait_for_text(R.out[3], "step 2 ", 60)) << read_text(R.err[3]);
  ::kill(R.pids[static_cast<size_t>(victim)], SIGKILL);
  ::waitpid(R.pids[static_cast<size_t>(victim)], nullptr, 0);
  R.pids[static_cast<size_t>(victim)] = -1;
  double took = reap(R, victim, kTimeoutS + 6);
  for (int r = 0; r < world; ++r) {
    if (r == victim) continue;
    ASSERT_EQ(R.pids[static_cast<size_t>(r)], -1) << "rank " << r << " still running after " << took << " s";
    int st = R.status[static_cast<size_t>(r)];
    EXPECT_TRUE(!WIFEXITED(st) || WEXITSTATUS(st) != 0) << "rank " << r << " exited 0";
    std::string err = read_text(R.err[static_cast<size_t>(r)]);
    EXPECT_NE(err.find("peer rank " + std::to_string(victim) + " failed"), std::string::npos) << "rank " << r << ":\n" << err;
  }
  // Detection at timeout/2 of silence, plus process teardown on a loaded 2-core machine.
  EXPECT_LT(took, kTimeoutS + 3) << "the ranks took " << took << " s to exit";
}

TEST(RuntimeFault, KilledMiddleRankIsNamedByEveryOtherRank) { kill_mid_run(1); }

TEST(RuntimeFault, KilledStoreHostIsNamedByEveryOtherRank) { kill_mid_run(0); }

TEST(RuntimeFault, RejectedConfigsFailBeforeAnyRankStarts) {
  struct Case {
    std::string args, expect;
  };
  for (const Case& c : {Case{"--model tiny --nproc 3 --tp 3", "num_heads"},
                        Case{"--model tiny --nproc 2 --pp 2 --schedule interleaved-1f1b --chunks 4", "fewer than the 8 stages"},
                        Case{"--model tiny --nproc 2 --pp 2 --backend nccl", "nccl"},
                        Case{"--model tiny --nproc 2 --dp 1 --pp 4", "dp*tp*pp"},
                        Case{"--model gpt3-175b --nproc 2 --pp 2", "needs at least"}}) {  // beyond a rank's memory
    RunResult r = run_cli("train " + c.args + " --steps 1");
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(r.err.find("rank 0"), std::string::npos) << "a rank started for " << c.args << "\n" << r.err;
  }
}

}  // namespace
}  // namespace stagecraft::test
