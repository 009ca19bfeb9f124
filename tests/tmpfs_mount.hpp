// For tests that need a disk that fills up or a folder root cannot write:
// a small tmpfs mounted for the test's duration (root only).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>

namespace bitlab::testing {

// A tmpfs of `kib` KiB mounted at `dir` (made if missing) while this object
// lives: a real disk that fills up (ENOSPC from the kernel), or with
// `read_only` a folder even root cannot write (EROFS). Mounting needs root
// (CAP_SYS_ADMIN): `mounted` says whether it worked; a test without it says
// it skipped. Declared after the TempDir holding `dir`, it is unmounted first.
struct TmpfsMount {
  std::filesystem::path path;
  bool mounted = false;
  TmpfsMount(std::filesystem::path dir, int kib, bool read_only = false) : path(std::move(dir)) {
    std::filesystem::create_directories(path);
    const std::string cmd = std::string("mount -t tmpfs -o ") + (read_only ? "ro," : "") +
                            "size=" + std::to_string(kib) + "k tmpfs " + path.string() +
                            " >/dev/null 2>&1";
    mounted = std::system(cmd.c_str()) == 0;
  }
  ~TmpfsMount() {
    if (mounted) (void)std::system(("umount " + path.string()).c_str());
  }
  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;
};

}  // namespace bitlab::testing
