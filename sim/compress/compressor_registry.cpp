// The compressors `bitlab` knows by name, their options schemas, and
// make_compressor. Adding one: its class (sim/compress/compressors.hpp), an options
// struct with a schema, and one line in the registry below.
#include <string>
#include <vector>

#include "sim/compress/compressor.hpp"
#include "sim/compress/compressors.hpp"
#include "sim/compress/group_limits.hpp"
#include "sim/core/registry.hpp"

namespace bitlab {

Schema<SignOptions> SignOptions::schema() {
  Schema<SignOptions> s;
  s.field("scale", &SignOptions::scale,
          "the scale a of a·sign(x): \"rms\" = ‖x‖₂/√n keeps ‖C(x)‖₂ = ‖x‖₂ (the 1-bit Adam "
          "reference); \"l1\" = ‖x‖₁/n, the δ-contraction of EF-signSGD (Karimireddy et al. "
          "2019)",
          {rules::one_of({"rms", "l1"})});
  return s;
}

Schema<NbitOptions> NbitOptions::schema() {
  Schema<NbitOptions> s;
  s.field("bits", &NbitOptions::bits,
          "bits b per element: codes q ∈ [−2^(b−1), 2^(b−1)−1] (LoCo uses 4)",
          {rules::at_least<int64_t>(1), rules::at_most<int64_t>(8)});
  s.field("group_size", &NbitOptions::group_size,
          "consecutive elements sharing one scale M = max|y| (the reference's group size)",
          {rules::at_least<int64_t>(1), rules::at_most<int64_t>(kMaxQuantizeGroup)});
  s.field("rounding", &NbitOptions::rounding,
          "\"nearest\" (ties to even) or \"stochastic\" (unbiased inside the clamp range, "
          "draws from the compress stream)",
          {rules::one_of({"nearest", "stochastic"})});
  s.field("scale_dtype", &NbitOptions::scale_dtype,
          "type of each group's scale on the wire: \"fp32\" (4 bytes) or \"fp16\" (2 bytes; M "
          "rounded up to fp16, saturating at 65504)",
          {rules::one_of({"fp32", "fp16"})});
  return s;
}

Schema<TopkOptions> TopkOptions::schema() {
  Schema<TopkOptions> s;
  s.field("ratio", &TopkOptions::ratio,
          "fraction of elements kept: k = max(1, round(ratio·n)), capped at n",
          {rules::greater(0.0), rules::at_most(1.0)});
  s.field("k", &TopkOptions::k, "elements kept (capped at n); 0 = use ratio",
          {rules::at_least<int64_t>(0)});
  return s;
}

Schema<RandomkOptions> RandomkOptions::schema() {
  Schema<RandomkOptions> s;
  s.field("ratio", &RandomkOptions::ratio,
          "fraction of elements kept: k = max(1, round(ratio·n)), capped at n",
          {rules::greater(0.0), rules::at_most(1.0)});
  s.field("k", &RandomkOptions::k, "elements kept (capped at n); 0 = use ratio",
          {rules::at_least<int64_t>(0)});
  s.field("shared_seed", &RandomkOptions::shared_seed,
          "the receiver regenerates the indices from a shared stream, so no indices are sent "
          "(wire 4k bytes instead of 8k)");
  s.field("rescale", &RandomkOptions::rescale,
          "multiply the kept values by n/k so that E[C(x)] = x (unbiased; variance grows)");
  return s;
}

const std::vector<RegistryEntry<Compressor>>& compressor_registry() {
  static const std::vector<RegistryEntry<Compressor>> kRegistry = {
      make_registry_entry<Compressor, IdentityCompressor, NoCompressorOptions>(
          "identity", "no compression: fp32 on the wire (4 bytes/element)"),
      make_registry_entry<Compressor, CastCompressor, Fp16CastOptions>(
          "fp16", "cast to IEEE fp16, round to nearest even (2 bytes/element)"),
      make_registry_entry<Compressor, CastCompressor, Bf16CastOptions>(
          "bf16", "cast to bfloat16, round to nearest even (2 bytes/element)"),
      make_registry_entry<Compressor, SignCompressor, SignOptions>(
          "sign",
          "scaled sign a·sign(x), 1 bit/element + one fp32 scale (1-bit Adam, Tang et al. 2021; "
          "EF-signSGD, Karimireddy et al. 2019)"),
      make_registry_entry<Compressor, NbitCompressor, NbitOptions>(
          "nbit",
          "n-bit symmetric per-group quantization, b bits/element + one scale per group "
          "(LoCo, Xie et al. 2024; ZeRO++)"),
      make_registry_entry<Compressor, TopkCompressor, TopkOptions>(
          "topk", "keeps the k largest |x|: k fp32 values + k uint32 indices (Stich et al. 2018)"),
      make_registry_entry<Compressor, RandomkCompressor, RandomkOptions>(
          "randomk",
          "keeps k random elements: k fp32 values (+ k uint32 indices without a shared seed)"),
      make_registry_entry<Compressor, BinarizeCompressor, NoCompressorOptions>(
          "binarize",
          "unbiased randomized binarization of z ∈ [−1, 1]: +1 w.p. (1+z)/2, 1 bit/element "
          "(BinSGDM/Birder, 2023)"),
  };
  return kRegistry;
}

std::unique_ptr<Compressor> make_compressor(const Json& options, const std::string& path) {
  const auto& registry = compressor_registry();
  std::vector<std::string> names;
  for (const auto& e : registry) names.push_back(e.name);
  if (!options.is_object()) config_fail(path, options, "must be a JSON object with a \"name\"");
  if (!options.contains("name")) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    config_fail(join_path(path, "name"), Json(nullptr), "missing; one of: " + list);
  }
  const Json& name = options.at("name");
  if (!name.is_string()) config_fail(join_path(path, "name"), name, "must be a string");
  const auto* entry = find_entry(registry, name.get<std::string>());
  if (!entry) {
    config_fail(join_path(path, "name"), name, one_of_message(name.get<std::string>(), names));
  }
  return entry->make(entry->resolve(options, path));
}

}  // namespace bitlab
