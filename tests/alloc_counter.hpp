// Counting the test binary's heap allocations (the principle "step() does not
// allocate once sizes are steady", README architecture). tests/alloc_counter.cpp
// replaces the global operator new / delete of bitlab_tests with malloc/free
// wrappers that count calls of operator new while a CountAllocations is alive,
// on any thread. C code (OpenMPI's own buffers) uses malloc and is not counted.
#pragma once

#include <cstdint>
#include <string>

namespace bitlab {
class Transport;
}

namespace bitlab::testing {

class CountAllocations {
 public:
  CountAllocations();
  ~CountAllocations();
  CountAllocations(const CountAllocations&) = delete;
  CountAllocations& operator=(const CountAllocations&) = delete;
  // Calls of operator new since construction.
  int64_t count() const;
  // Bytes those calls asked for (what is freed again is not subtracted).
  int64_t bytes() const;
};

// Optimizer configurations (JSON) that reach every phase of the optimizers
// within 40 steps: warm-up → compression, 0/1 Adam's local steps,
// hierarchical variants.
const char* const* steady_step_optimizers();

// Runs `optimizer` (JSON) on a small 8-worker MLP (Simulation, on `transport`:
// nullptr = the simulator) for 40 steps, then returns the heap allocations
// made by the next 40 steps (the log's growth excluded: it is reserved).
int64_t steady_step_allocations(const std::string& optimizer, Transport* transport = nullptr);

}  // namespace bitlab::testing
