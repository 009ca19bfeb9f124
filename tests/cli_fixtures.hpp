// For tests that run the `bitlab` binary (BITLAB_BINARY, a compile definition
// of the test binary): scratch folders and captured output.
#pragma once

#include <stdlib.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace bitlab::testing {

struct Result {
  int status;  // exit status, -1 if killed by a signal
  std::string out, err;
};

// A scratch folder per test case, removed at the end.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/bitlab-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Writes `content` to path/name (making its folders) and returns its path.
  std::string file(const std::string& name, const std::string& content) const {
    std::filesystem::create_directories((path / name).parent_path());
    std::ofstream(path / name) << content;
    return (path / name).string();
  }
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs a shell command line with stdout and stderr captured in `dir`.
inline Result run_shell(const TempDir& dir, const std::string& command) {
  const std::string out = (dir.path / "stdout.txt").string();
  const std::string err = (dir.path / "stderr.txt").string();
  const std::string cmd = command + " >" + out + " 2>" + err;
  const int raw = std::system(cmd.c_str());
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, slurp(out), slurp(err)};
}

// Runs `bitlab ARGS` (with optional leading environment assignments).
inline Result run_bitlab(const TempDir& dir, const std::string& args, const std::string& env = "") {
  return run_shell(dir, env + (env.empty() ? "" : " ") + BITLAB_BINARY + " " + args);
}

// metrics.csv without its last column (wall_s, the one column that differs
// between runs of the same config).
inline std::string without_wall_column(const std::string& csv) {
  std::istringstream in(csv);
  std::string line, out;
  while (std::getline(in, line)) out += line.substr(0, line.rfind(',')) + "\n";
  return out;
}

// `bitlab run CONFIG --quiet` into dir/NAME with BITLAB_ISA=isa and
// OMP_NUM_THREADS=threads: how it ended, and its metrics.csv without wall_s.
struct IsaRun {
  Result result;
  std::string metrics;
};
inline IsaRun run_with_isa(const TempDir& dir, const std::string& config, const std::string& name,
                           const std::string& isa, int threads) {
  const std::filesystem::path out = dir.path / name;
  IsaRun run;
  run.result = run_bitlab(dir, "run " + config + " --out " + out.string() + " --quiet",
                          "BITLAB_ISA=" + isa + " OMP_NUM_THREADS=" + std::to_string(threads));
  run.metrics = without_wall_column(slurp(out / "metrics.csv"));
  return run;
}

}  // namespace bitlab::testing
