#include "sim/core/memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

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
  if (have == 0 || bytes <= have) return;
  const std::string need =
      bytes == UINT64_MAX ? "more than 18 EB" : human_bytes(static_cast<double>(bytes));
  throw ConfigError(what + " need at least " + need + " (" + how + "), this machine has " +
                    human_bytes(static_cast<double>(have)) + "; " + advice);
}

}  // namespace bitlab
