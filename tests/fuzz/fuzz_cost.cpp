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
    std::vector<bitlab::CostOverride> overrides;
    for (const auto& s : in.sets) overrides.push_back({s, "--set " + s});
    const bitlab::CostReport report = bitlab::estimate_cost(bitlab::resolve_cost_request(
        bitlab::parse_json_text(in.text, "fuzz.json"), overrides));
    (void)bitlab::format_cost_report(report);
    (void)bitlab::cost_report_json(report).dump(2);
  } catch (const bitlab::ConfigError&) {
  }
  return 0;
}
