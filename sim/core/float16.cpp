#include "sim/core/float16.hpp"

#include <stdexcept>

namespace bitlab {

const char* wire_dtype_name(WireDtype t) {
  switch (t) {
    case WireDtype::kFp32:
      return "fp32";
    case WireDtype::kFp16:
      return "fp16";
    case WireDtype::kBf16:
      return "bf16";
  }
  return "?";
}

WireDtype parse_wire_dtype(const std::string& s) {
  if (s == "fp32") return WireDtype::kFp32;
  if (s == "fp16") return WireDtype::kFp16;
  if (s == "bf16") return WireDtype::kBf16;
  throw std::invalid_argument("unknown wire dtype: " + s);
}

void round_to_wire(std::span<float> v, WireDtype t) {
  const int64_t n = static_cast<int64_t>(v.size());
  if (t == WireDtype::kFp16) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) v[i] = round_to_half(v[i]);
  } else if (t == WireDtype::kBf16) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) v[i] = round_to_bf16(v[i]);
  }
}

}  // namespace bitlab
