// Rank discovery from the environment and the local launcher behind `train --nproc N`.
// No torch here. The launcher forks each rank; a fork runs the rank itself (LibTorch already loaded
// and no thread started) or execs the same binary again.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include "runtime/train.h"
#include "schedules/error.h"

namespace stagecraft::runtime {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int env_int(const char* name, int fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 24)
    throw InputError(std::string("environment variable ") + name + " = '" + v + "' is not a non-negative integer");
  return static_cast<int>(x);
}

// A TCP port that was free a moment ago on 127.0.0.1 (the OS picks it).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error("cannot open a socket to find a free port: " + std::string(std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw Error("cannot bind a socket to find a free port: " + std::string(std::strerror(errno)));
  }
  int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

// The child's side of a launch: the rank's environment, and its death with the launcher's.
void become_rank(int rank, int nproc, int port) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a rank never outlives its launcher
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  ::setenv("STAGECRAFT_LAUNCHED", "1", 1);
}

// Whether this process runs one thread only (Linux: /proc/self/task), so that a fork of it
// holds every lock it needs.
bool single_threaded() {
  std::error_code ec;
  long n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/task", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec))
    ++n;
  return !ec && n == 1;
}

[[noreturn]] void run_forked_rank(const std::function<int()>& rank_main) {
  const int rc = rank_main();
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(rc);  // the launcher's exit handlers and static objects stay the launcher's
}

[[noreturn]] void exec_rank(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv("/proc/self/exe", args.data());
  std::cerr << "stagecraft train: cannot exec /proc/self/exe for rank " << std::getenv("RANK") << ": " << std::strerror(errno) << "\n";
  std::_Exit(127);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "stopped";
}

}  // namespace

bool launched_locally() { return env("STAGECRAFT_LAUNCHED") != nullptr; }

bool world_from_environment() {
  return env("RANK") || env("WORLD_SIZE") || env("SLURM_PROCID") || env("OMPI_COMM_WORLD_RANK");
}

RankEnv rank_env_from_environment() {
  RankEnv e;
  if (env("RANK") || env("WORLD_SIZE")) {  // the variables world_from_environment reads
    e.rank = env_int("RANK", 0);
    e.world = env_int("WORLD_SIZE", 1);
  } else if (env("SLURM_PROCID")) {
    e.rank = env_int("SLURM_PROCID", 0);
    e.world = env_int("SLURM_NTASKS", 1);
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    e.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    e.world = env_int("OMPI_COMM_WORLD_SIZE", 1);
  }
  if (e.world < 1 || e.rank >= e.world)
    throw InputError("rank " + std::to_string(e.rank) + " is not below the world size " + std::to_string(e.world));
  e.local_rank = e.rank;
  for (const char* k : {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"})
    if (env(k)) {
      e.local_rank = env_int(k, 0);
      break;
    }
  if (env("MASTER_ADDR")) e.master_addr = env("MASTER_ADDR");
  e.master_port = env_int("MASTER_PORT", 0);
  if (e.world > 1 && e.master_port == 0)
    throw InputError("world size " + std::to_string(e.world) +
                     " but MASTER_PORT is not set: export MASTER_ADDR and MASTER_PORT (rank 0 hosts the TCPStore there)");
  return e;
}

int launch_local(int nproc, const std::vector<std::string>& argv, double timeout_s, const std::function<int()>& rank_main) {
  const int port = free_port();
  const bool fork_only = rank_main && single_threaded();
  std::cout.flush();  // nothing buffered here is printed twice by the ranks
  std::cerr.flush();
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < nproc; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) throw Error("fork failed for rank " + std::to_string(r) + ": " + std::strerror(errno));
    if (pid == 0) {
      become_rank(r, nproc, port);
      if (fork_only) run_forked_rank(rank_main);
      exec_rank(argv);
    }
    pids.push_back(pid);
  }
  int result = 0, alive = nproc;
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (alive > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::cerr << "stagecraft train: ranks still running " << 2 * timeout_s + 10
                  << " s after a failure; killing them\n";
        for (pid_t p : pids)
          if (p > 0) ::kill(p, SIGKILL);
        deadline = std::chrono::steady_clock::time_point::max();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (pid < 0) break;
    for (size_t r = 0; r < pids.size(); ++r) {
      if (pids[r] != pid) continue;
      pids[r] = -1;
      --alive;
      if (status != 0) {
        std::cerr << "stagecraft train: rank " << r << " " << describe_status(status) << "\n";
        if (result == 0) {
          result = 1;
          deadline = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<long>((2 * timeout_s + 10) * 1000));
        }
      }
    }
  }
  return result;
}

}  // namespace stagecraft::runtime
