// libFuzzer harness: the experiment-file + `--set` path, as `bitlab validate
// FILE --set A --set B --print` takes it before building the simulation
// (load_experiment without the file read, then the resolved experiment
// printed). A ConfigError is the promised refusal (exit 2); anything else that
// escapes (another exception, a sanitizer report, a crash) is a finding.
#include <cstddef>
#include <cstdint>

#include "sim/engine/config.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bitlab::fuzz::Input in = bitlab::fuzz::split_input(data, size);
  try {
    bitlab::Json raw = bitlab::parse_json_text(in.text, "fuzz.json");
    for (const auto& s : in.sets) bitlab::apply_set(raw, s);
    const bitlab::Experiment e = bitlab::resolve_experiment(raw, "fuzz", in.sets);
    (void)e.resolved.dump(2);
  } catch (const bitlab::ConfigError&) {
  }
  return 0;
}
