#include "sim/core/files.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace bitlab {

namespace fs = std::filesystem;

void write_text_atomic(const std::string& path, const std::string& text) {
  // Written to a temporary name and renamed: a reader never sees half a file.
  // The name carries the process id, so processes writing the same file at
  // once (sweep shards starting together in a shared folder) do not collide.
  const fs::path p(path);
  const fs::path tmp = p.string() + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp);
    out << text;
    errno = 0;
    out.close();  // the data reaches the system here: a full disk shows now
    if (!out) {
      const std::string why = errno != 0 ? std::strerror(errno) : "write error";
      std::error_code ignored;
      fs::remove(tmp, ignored);  // never rename a partial file into place
      throw std::runtime_error("cannot write " + p.string() + ": " + why);
    }
  }
  fs::rename(tmp, p);
}

}  // namespace bitlab
