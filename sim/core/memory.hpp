// How much memory this machine (or the control group bitlab runs in) has, and
// the check a run makes before it allocates its large buffers: a request that
// cannot fit is refused with the estimate and the machine's memory (exit 2)
// instead of being killed by the kernel midway through zeroing it.
#pragma once

#include <cstdint>
#include <string>

namespace bitlab {

// Physical memory, or the cgroup v2 limit (/sys/fs/cgroup/memory.max) when it
// is smaller. 0 when neither can be read.
uint64_t machine_memory_bytes();

// Memory available to this process now: /proc/meminfo's MemAvailable (free
// memory and what the kernel can reclaim, e.g. the page cache), or what the
// cgroup v2 limit leaves (memory.max - memory.current) when that is smaller.
// machine_memory_bytes() when neither can be read; 0 when that cannot either.
uint64_t available_memory_bytes();

// Throws ConfigError "<what> need(s) at least <bytes> (<how>), this machine
// has <memory>; <advice>" when `bytes` exceeds the machine's memory, and
// "..., this machine has <memory>, <available> of it available now; ..."
// when `bytes` plus a 1/16 margin (allocator overhead and buffers the
// estimate does not count) exceeds the memory available now (another
// process may hold the rest; allocating it would end in std::bad_alloc or
// the kernel's OOM killer midway). Sizes that overflow are passed as UINT64_MAX.
void check_memory_fits(uint64_t bytes, const std::string& what, const std::string& how,
                       const std::string& advice);

// The most resident memory this process has held so far (getrusage's
// ru_maxrss), in bytes; 0 when it cannot be read.
uint64_t peak_resident_bytes();

// a·b·c, or UINT64_MAX when it does not fit.
uint64_t saturating_mul(uint64_t a, uint64_t b, uint64_t c = 1);

}  // namespace bitlab
