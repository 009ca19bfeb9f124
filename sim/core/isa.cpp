#include "sim/core/isa.hpp"

#include <cstdlib>

#include "sim/core/schema.hpp"

namespace bitlab {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kSse2:
      return "sse2";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

bool isa_supported(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  switch (isa) {
    case Isa::kSse2:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
  }
  return false;
#else
  return isa == Isa::kSse2;  // the portable build of the same source
#endif
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kSse2, Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

Isa parse_isa(const std::string& name) {
  for (Isa isa : {Isa::kSse2, Isa::kAvx2, Isa::kAvx512})
    if (name == isa_name(isa)) return isa;
  throw ConfigError("BITLAB_ISA = \"" + name + "\": must be one of sse2, avx2, avx512");
}

namespace {
Isa choose_isa() {
  const char* forced = std::getenv("BITLAB_ISA");
  if (forced != nullptr && *forced != '\0') {
    const Isa isa = parse_isa(forced);
    if (!isa_supported(isa))
      throw ConfigError(std::string("BITLAB_ISA = \"") + forced +
                        "\": this CPU does not support it");
    return isa;
  }
  return supported_isas().back();
}
}  // namespace

Isa active_isa() {
  static const Isa isa = choose_isa();
  return isa;
}

}  // namespace bitlab
