// libFuzzer harness: checkpoint loading, as `bitlab run --resume DIR` takes it
// (resume_point, then run_experiment resuming: the seal, the format, the
// version, the config hash, every entry's name, type and count against the
// file's size, the semantic checks against the folder's csvs, and, when all
// of it holds, the rest of the run). The input is a checkpoint.bin
// (tests/fuzz/checkpoint_input.hpp: a mode byte, then the file, resealed or
// not); the folder is a fresh copy of a real run of
// tests/fuzz/checkpoint_experiment.json for every input. A ConfigError is the
// promised refusal (exit 2); anything else that escapes is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "sim/engine/config.hpp"
#include "sim/engine/run.hpp"
#include "tests/fuzz/checkpoint_input.hpp"

namespace fs = std::filesystem;

namespace {

fs::path g_template, g_work;

}  // namespace

// The run folder (without summary.json and checkpoint.bin) that every input's
// checkpoint.bin is put into: BITLAB_FUZZ_CHECKPOINT_RUN, made with the seeds
// by tests/fuzz/make_seeds.py (the seeds' byte counts match its csvs).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* run = std::getenv("BITLAB_FUZZ_CHECKPOINT_RUN");
  if (run == nullptr || !fs::exists(fs::path(run) / "config.json")) {
    std::fprintf(stderr,
                 "fuzz_checkpoint: set BITLAB_FUZZ_CHECKPOINT_RUN to the run folder "
                 "make_seeds.py made (tests/fuzz/run.sh checkpoint does)\n");
    std::exit(1);
  }
  g_template = run;
  g_work = fs::temp_directory_path() / ("bitlab-fuzz-checkpoint-" + std::to_string(getpid()));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fs::remove_all(g_work);
  fs::create_directories(g_work);
  for (const char* name : {"config.json", "manifest.json", "metrics.csv", "comm_log.csv"}) {
    fs::copy_file(g_template / name, g_work / name);
  }
  std::ofstream(g_work / "checkpoint.bin", std::ios::binary)
      << bitlab::fuzz::checkpoint_bytes(data, size);
  try {
    const bitlab::ResumePoint point = bitlab::resume_point(g_work.string());
    bitlab::RunOptions o;
    o.out_dir = g_work.string();
    o.quiet = true;
    o.print_dir = false;
    o.threads = 1;
    o.checkpoint_every = point.checkpoint_every;
    o.resume = true;
    (void)bitlab::run_experiment(point.experiment, o);
  } catch (const bitlab::ConfigError&) {
  }
  return 0;
}
