#include "sim/core/memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "sim/core/human.hpp"
#include "sim/core/schema.hpp"

namespace bitlab {

uint64_t machine_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  uint64_t total = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
  std::ifstream cg("/sys/fs/cgroup/memory.max");
  uint64_t limit = 0;
  if (cg >> limit && limit > 0) total = total == 0 ? limit : std::min(total, limit);
  return total;  // "max" (no limit) fails the read above and leaves the physical size
}

namespace {

// A "<key>: <n> kB" line of /proc/meminfo, in bytes; 0 when absent.
uint64_t meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string name, unit;
  uint64_t value = 0;
  while (in >> name >> value) {
    std::getline(in, unit);
    if (name == key + ":") return value * 1024;
  }
  return 0;
}

uint64_t file_number(const char* path) {
  std::ifstream in(path);
  uint64_t n = 0;
  return in >> n ? n : 0;  // "max" (no limit) reads as 0
}

}  // namespace

uint64_t available_memory_bytes() {
  uint64_t available = meminfo_bytes("MemAvailable");
  const uint64_t limit = file_number("/sys/fs/cgroup/memory.max");
  if (limit > 0) {
    const uint64_t used = file_number("/sys/fs/cgroup/memory.current");
    const uint64_t left = limit > used ? limit - used : 0;
    available = available == 0 ? left : std::min(available, left);
  }
  return available > 0 ? available : machine_memory_bytes();
}

uint64_t peak_resident_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0 || usage.ru_maxrss < 0) return 0;
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

uint64_t saturating_mul(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out) || __builtin_mul_overflow(out, c, &out)) {
    return UINT64_MAX;
  }
  return out;
}

void check_memory_fits(uint64_t bytes, const std::string& what, const std::string& how,
                       const std::string& advice) {
  const uint64_t have = machine_memory_bytes();
  if (have == 0) return;
  const std::string need =
      bytes == UINT64_MAX ? "more than 18 EB" : human_bytes(static_cast<double>(bytes));
  if (bytes > have) {
    throw ConfigError(what + " need at least " + need + " (" + how + "), this machine has " +
                      human_bytes(static_cast<double>(have)) + "; " + advice);
  }
  const uint64_t available = available_memory_bytes();
  if (available == 0 || bytes + bytes / 16 <= available) return;
  throw ConfigError(what + " need at least " + need + " (" + how + ") and 1/16 more as a margin, "
                    "this machine has " + human_bytes(static_cast<double>(have)) + ", " +
                    human_bytes(static_cast<double>(available)) + " of it available now; " +
                    advice + " (or free memory)");
}

}  // namespace bitlab
