// Shared by the benchmarks that time whole simulated steps: the reference
// their timed parameters are checked against (bench_util.hpp: Check).
#pragma once

#include <string>
#include <vector>

#include "sim/engine/simulation.hpp"
#include "tests/bench/bench_util.hpp"

namespace bitlab::bench {

// The parameters after `steps` steps of a fresh simulation of the experiment
// `text`, run with `threads` OpenMP threads.
inline std::vector<float> params_after_steps(const std::string& text, int steps, int threads) {
  return with_threads(threads, [&] {
    Simulation sim(resolve_experiment(Json::parse(text), "bench"));
    for (int s = 0; s < steps; ++s) sim.step();
    const std::span<const float> x = sim.cluster().params();
    return std::vector<float>(x.begin(), x.end());
  });
}

}  // namespace bitlab::bench
