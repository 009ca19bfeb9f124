#include "sim/comm/launcher.hpp"

#include <charconv>
#include <cstdlib>

namespace bitlab {

namespace {

std::optional<int> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  const std::string s(v);
  int out = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return out;
}

std::optional<LauncherRank> from(const char* rank_var, const char* size_var) {
  const auto rank = env_int(rank_var), size = env_int(size_var);
  if (!rank || !size || *size < 2 || *rank < 0 || *rank >= *size) return std::nullopt;
  return LauncherRank{*rank, *size, std::string(rank_var) + "/" + size_var};
}

}  // namespace

std::optional<LauncherRank> mpi_launcher_rank() {
  if (auto r = from("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")) return r;
  return from("PMI_RANK", "PMI_SIZE");
}

std::optional<LauncherRank> shard_launcher_rank() {
  if (auto r = mpi_launcher_rank()) return r;
  const auto id = env_int("SLURM_ARRAY_TASK_ID"), count = env_int("SLURM_ARRAY_TASK_COUNT");
  const auto min = env_int("SLURM_ARRAY_TASK_MIN");
  if (!id || !count || *count < 2) return std::nullopt;
  const int rank = *id - min.value_or(0);
  if (rank < 0 || rank >= *count) return std::nullopt;
  return LauncherRank{rank, *count, "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT"};
}

bool is_launcher_variable(const std::string& name) {
  for (const char* prefix : {"OMPI_COMM_WORLD_", "PMI_", "PMIX_RANK"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

}  // namespace bitlab
