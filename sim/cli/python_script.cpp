// Running the repository's Python scripts (sim/cli/python_script.hpp).
#include "sim/cli/python_script.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

extern char** environ;

namespace bitlab {

namespace {

namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";

// The script's path, or "" after printing what was tried.
std::string find_script(const std::string& name) {
  std::vector<std::string> tried;
  if (const char* env = std::getenv("BITLAB_NOTEBOOKS"); env != nullptr && *env != '\0') {
    const fs::path p = fs::path(env) / name;
    if (fs::is_regular_file(p)) return p.string();
    tried.push_back(p.string() + " (from BITLAB_NOTEBOOKS)");
  } else {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      const fs::path p = (exe.parent_path() / ".." / "notebooks" / name).lexically_normal();
      if (fs::is_regular_file(p)) return p.string();
      tried.push_back(p.string() + " (next to the bitlab binary " + exe.string() + ")");
    } else {
      tried.push_back("/proc/self/exe (unreadable: " + ec.message() + ")");
    }
  }
  std::string list;
  for (const auto& t : tried) list += (list.empty() ? "" : ", ") + t;
  std::fprintf(stderr,
               "bitlab: error: cannot find the script notebooks/%s; tried %s. Set "
               "BITLAB_NOTEBOOKS to the repository's notebooks/ folder.\n",
               name.c_str(), list.c_str());
  return "";
}

}  // namespace

int run_python_script(const std::string& name, const std::vector<std::string>& script_args,
                      const std::string& packages) {
  if (access(kPython, X_OK) != 0) {
    std::fprintf(stderr,
                 "bitlab: error: %s is missing: this command needs Debian's Python; install "
                 "the Debian packages python3 and %s (apt-get install python3 %s)\n",
                 kPython, packages.c_str(), packages.c_str());
    return 2;
  }
  const std::string script = find_script(name);
  if (script.empty()) return 2;

  std::vector<std::string> args = {kPython, script};
  args.insert(args.end(), script_args.begin(), script_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, kPython, nullptr, nullptr, argv.data(), environ);
  if (err != 0) {
    std::fprintf(stderr, "bitlab: error: cannot start %s: %s\n", kPython, std::strerror(err));
    return 2;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      std::fprintf(stderr, "bitlab: error: waiting for %s: %s\n", kPython, std::strerror(errno));
      return 1;
    }
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace bitlab
