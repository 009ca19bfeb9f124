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

// Throws ConfigError "<what> need(s) at least <bytes> (<how>), this machine
// has <memory>; <advice>" when `bytes` exceeds the machine's memory. Sizes
// that overflow are passed as UINT64_MAX.
void check_memory_fits(uint64_t bytes, const std::string& what, const std::string& how,
                       const std::string& advice);

// The most resident memory this process has held so far (getrusage's
// ru_maxrss), in bytes; 0 when it cannot be read.
uint64_t peak_resident_bytes();

// a·b·c, or UINT64_MAX when it does not fit.
uint64_t saturating_mul(uint64_t a, uint64_t b, uint64_t c = 1);

}  // namespace bitlab
