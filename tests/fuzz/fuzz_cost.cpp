// libFuzzer harness: the cost-spec path, as `bitlab cost SPEC --set A ...
// [--json]` takes it (the spec, or an experiment file turned into one, the
// --set overrides in order, validation, pricing, and both reports). A ConfigError is the promised
// refusal (exit 2); anything else that escapes is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sim/engine/config.hpp"
#include "sim/lab/cost.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bitlab::fuzz::Input in = bitlab::fuzz::split_input(data, size);
  try {
    bitlab::Json raw = bitlab::parse_json_text(in.text, "fuzz.json");
    if (!raw.is_object()) return 0;  // refused by `bitlab cost` the same way
    // An experiment file is priced as it stands (sim/cli/cost_command.cpp).
    if (raw.contains("problem")) raw = bitlab::cost_spec_of_experiment(raw);
    std::vector<std::pair<std::string, std::string>> labels;
    for (const auto& s : in.sets) {
      bitlab::apply_set(raw, s);
      labels.emplace_back(s, "--set " + s);
    }
    const bitlab::CostReport report = bitlab::estimate_cost(bitlab::resolve_cost_spec(raw, labels));
    (void)bitlab::format_cost_report(report);
    (void)bitlab::cost_report_json(report).dump(2);
  } catch (const bitlab::ConfigError&) {
  }
  return 0;
}
