// Every JSON file under experiments/ (and notebooks/specs/) must stay valid as
// the code changes: experiment files resolve (problem and shards built too),
// sweep files resolve every run, cost specs resolve. A file that is none of
// these fails the test, so nothing in those folders can rot unnoticed.
#include <doctest/doctest.h>

#include <filesystem>

#include "sim/engine/config.hpp"
#include "sim/engine/deepspeed.hpp"
#include "sim/engine/simulation.hpp"
#include "sim/lab/cost.hpp"
#include "sim/lab/sweep.hpp"

using namespace bitlab;
namespace fs = std::filesystem;

TEST_SUITE("experiments") {
  TEST_CASE("every committed experiment, sweep and cost file is valid") {
    int checked = 0;
    for (const char* folder : {"experiments", "notebooks"}) {
      const fs::path root = fs::path(BITLAB_SOURCE_DIR) / folder;
      if (!fs::exists(root)) continue;
      for (const auto& entry : fs::recursive_directory_iterator(root)) {
        if (entry.path().extension() != ".json") continue;
        if (entry.path().string().find(".ipynb_checkpoints") != std::string::npos) continue;
        const std::string file = entry.path().string();
        CAPTURE(file);
        try {
          const Json raw = load_json_file(file);
          if (raw.contains("base")) {
            const SweepSpec spec = load_sweep(file);
            (void)spec;
          } else if (raw.contains("train_batch_size") ||
                     raw.contains("train_micro_batch_size_per_gpu")) {
            load_deepspeed_config(file);  // a DeepSpeed config (docs/deepspeed.md)
          } else if (raw.contains("params") && raw.contains("workers")) {
            resolve_cost_spec(raw);
          } else {
            const Experiment e = load_experiment(file, {});
            Simulation sim(e);  // builds the problem, the shards and the optimizer
          }
          ++checked;
        } catch (const ConfigError& err) {
          FAIL_CHECK(err.what());
        }
      }
    }
    CHECK(checked > 10);
  }
}
