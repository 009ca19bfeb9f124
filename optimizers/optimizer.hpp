// The optimizer interface. An optimizer reads the workers' gradients, moves
// data between workers only through the Communicator (which counts the
// bytes), and updates the parameters. It never prices communication.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "sim/cluster.hpp"
#include "sim/comm.hpp"
#include "sim/registry.hpp"

namespace bitlab {

struct StepContext {
  int64_t step;  // 1-based
  Cluster& cluster;
  Communicator& comm;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Called once before the first step: allocate all state here, so that
  // step() does not allocate.
  virtual void setup(Cluster& cluster) = 0;
  // One step: cluster.grads() holds every worker's gradient at its params.
  virtual void step(StepContext& ctx) = 0;
  // Phase of the last step (algorithm-specific; the baselines are "full").
  virtual const char* phase() const { return "full"; }
  // Bytes of per-worker state (one row per worker) this process holds: under
  // the MPI backend 1-bit Adam, 1-bit LAMB, 0/1 Adam and LoCo (h_i) hold their
  // rank's block of workers only; BinSGDM still holds every worker's rows.
  // 0 for optimizers with shared state only.
  virtual size_t worker_state_bytes() const { return 0; }
};

const std::vector<RegistryEntry<Optimizer>>& optimizer_registry();

}  // namespace bitlab
