#include "sim/kernels/dispatch.hpp"

#include <stdexcept>
#include <string>

namespace bitlab::isa_kernels {

// sim/kernels/isa_{sse2,avx2,avx512}.cpp: one source, three instruction sets.
namespace sse2 {
extern const KernelTable table;
}
namespace avx2 {
extern const KernelTable table;
}
namespace avx512 {
extern const KernelTable table;
}

const KernelTable& kernel_table(Isa isa) {
  if (!isa_supported(isa))
    throw std::invalid_argument(std::string("kernel_table: instruction set ") + isa_name(isa) +
                                " is not supported by this CPU");
  switch (isa) {
    case Isa::kAvx512:
      return avx512::table;
    case Isa::kAvx2:
      return avx2::table;
    case Isa::kSse2:
      break;
  }
  return sse2::table;
}

const KernelTable& active_kernels() {
  static const KernelTable& table = kernel_table(active_isa());
  return table;
}

}  // namespace bitlab::isa_kernels
