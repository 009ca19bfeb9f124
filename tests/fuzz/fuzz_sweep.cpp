// libFuzzer harness: the sweep-file path, as `bitlab sweep FILE` reads it
// before running anything: the sweep resolved into its runs (every run's
// experiment validated), without building each run's problem (the replay
// through the real binary does that). A "base" file path is looked up in
// experiments/ of the source tree. A ConfigError is the promised refusal
// (exit 2); anything else that escapes is a finding. --set is not a sweep
// flag: bytes after a NUL are ignored.
#include <cstddef>
#include <cstdint>

#include "sim/engine/config.hpp"
#include "sim/lab/sweep.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bitlab::fuzz::Input in = bitlab::fuzz::split_input(data, size);
  try {
    const bitlab::Json raw = bitlab::parse_json_text(in.text, "fuzz.json");
    const bitlab::SweepSpec spec =
        bitlab::resolve_sweep(raw, BITLAB_SOURCE_DIR "/experiments", "fuzz", false);
    (void)spec.runs.size();
  } catch (const bitlab::ConfigError&) {
  }
  return 0;
}
