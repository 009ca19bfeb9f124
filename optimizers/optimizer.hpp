// The optimizer interface. An optimizer reads the workers' gradients, moves
// data between workers only through the Communicator (which counts the
// bytes), and updates the parameters. It never prices communication.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "sim/cluster/cluster.hpp"
#include "sim/comm/comm.hpp"
#include "sim/core/registry.hpp"

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
  // Bytes of per-worker state (one row per worker) this process holds, the
  // rows of the compressed collectives it owns included (each optimizer says
  // what it counts): under the MPI backend every optimizer holds its rank's
  // block of workers only. 0 for optimizers with shared state only.
  virtual size_t worker_state_bytes() const { return 0; }
};

const std::vector<RegistryEntry<Optimizer>>& optimizer_registry();

}  // namespace bitlab
