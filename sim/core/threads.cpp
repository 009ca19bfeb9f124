#include "sim/core/threads.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace bitlab {

int machine_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

namespace {
constexpr const char* kSetByBitlab = "BITLAB_OMP_WAIT_SET";  // marks our own re-start
bool has_env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}
}  // namespace

void ensure_passive_omp_wait(char** argv) {
  if (has_env("OMP_WAIT_POLICY") || has_env("GOMP_SPINCOUNT")) return;  // the user's choice
  if (has_env("BITLAB_NO_REEXEC") || argv == nullptr || argv[0] == nullptr) return;
  // Set both for the new image: the marker says who chose the policy (and
  // stops a loop should the variable somehow not survive the exec).
  if (has_env(kSetByBitlab)) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  setenv(kSetByBitlab, "1", 1);
  execv("/proc/self/exe", argv);
  // No /proc (or no exec): run on under libgomp's default; say what it is.
  unsetenv("OMP_WAIT_POLICY");
  unsetenv(kSetByBitlab);
}

std::string omp_wait_policy_text() {
  if (has_env(kSetByBitlab) && has_env("OMP_WAIT_POLICY")) return "passive (set by bitlab)";
  if (has_env("OMP_WAIT_POLICY")) {
    return std::string("OMP_WAIT_POLICY=") + std::getenv("OMP_WAIT_POLICY") + " (set by the user)";
  }
  if (has_env("GOMP_SPINCOUNT")) {
    return std::string("GOMP_SPINCOUNT=") + std::getenv("GOMP_SPINCOUNT") + " (set by the user)";
  }
  return "spin (libgomp's default)";
}

int threads_per_job(int jobs, int requested, int cores) {
  if (requested > 0) return requested;
  return std::max(1, cores / std::max(1, jobs));
}

std::string thread_count_warning(int threads, int cores) {
  if (threads <= cores) return "";
  return "--threads " + std::to_string(threads) + " is more than this machine's " +
         std::to_string(cores) + " core" + (cores == 1 ? "" : "s") +
         ": the threads share cores and each parallel region waits for the slowest, so the "
         "run is slower than with " +
         std::to_string(cores) + " (the results are the same)";
}

}  // namespace bitlab
