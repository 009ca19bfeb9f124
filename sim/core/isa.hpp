// Run-time dispatch of the hot loops to the widest x86-64 instruction set the
// CPU has. Every variant is compiled from the same source with the same
// operation order and no FMA contraction, so the choice changes speed, never
// bits (docs/design.md, "Deterministic by construction"; proven by the
// "every dispatched variant" tests). BITLAB_ISA=sse2|avx2|avx512 forces one
// (for tests and benchmarks); forcing one the CPU lacks is an error.
#pragma once

#include <string>
#include <vector>

namespace bitlab {

enum class Isa { kSse2, kAvx2, kAvx512 };

const char* isa_name(Isa isa);
bool isa_supported(Isa isa);
// The variants this CPU can run, narrowest first (kSse2 always).
std::vector<Isa> supported_isas();
// The one the hot loops use: BITLAB_ISA if set (ConfigError naming the
// variable, its value and the rule when unknown or unsupported), else the widest
// supported. Read once per process.
Isa active_isa();
// Parses "sse2", "avx2", "avx512"; ConfigError otherwise.
Isa parse_isa(const std::string& name);

// The one of three per-variant things (kernel tables, function pointers) for
// `isa`.
template <class T>
T for_isa(Isa isa, T sse2, T avx2, T avx512) {
  return isa == Isa::kAvx512 ? avx512 : isa == Isa::kAvx2 ? avx2 : sse2;
}

}  // namespace bitlab
