#include "sim/core/files.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "sim/core/schema.hpp"

namespace bitlab {

namespace fs = std::filesystem;

namespace {

// The temporary file write_text_atomic writes `path` through, without the
// process id that ends it.
std::string temp_prefix(const std::string& path) { return path + ".tmp."; }

}  // namespace

void write_text_atomic(const std::string& path, const std::string& text) {
  // Written to a temporary name and renamed: a reader never sees half a file.
  // The name carries the process id, so processes writing the same file at
  // once (sweep shards starting together in a shared folder) do not collide.
  const fs::path p(path);
  const fs::path tmp = temp_prefix(p.string()) + std::to_string(getpid());
  {
    errno = 0;
    std::ofstream out(tmp);
    if (!out) {
      throw IoError("cannot write " + p.string() + ": " +
                    (errno != 0 ? std::strerror(errno) : "cannot create the file"));
    }
    // A text longer than the stream's buffer meets a full disk while it is
    // written, a short one at the flush: keep the first errno either sets.
    errno = 0;
    out << text;
    out.flush();
    int error = out ? 0 : errno;
    out.close();  // whatever is still buffered reaches the system here
    if (!out) {
      if (error == 0) error = errno;
      const std::string why = error != 0 ? std::strerror(error) : "write error";
      std::error_code ignored;
      fs::remove(tmp, ignored);  // never rename a partial file into place
      throw IoError("cannot write " + p.string() + ": " + why);
    }
  }
  std::error_code ec;
  fs::rename(tmp, p, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw IoError("cannot write " + p.string() + ": " + ec.message());
  }
}

void create_folder(const std::string& dir, const std::string& what) {
  // The folders that do not exist yet, deepest first: a failure part-way
  // (a name longer than the file system allows) takes back the empty ones it
  // made, so no empty results/ is left behind.
  std::vector<fs::path> missing;
  std::error_code ec;
  for (fs::path p(dir); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  fs::create_directories(dir, ec);
  if (!ec) return;
  for (const auto& p : missing) {
    std::error_code ignored;
    fs::remove(p, ignored);  // removes only an empty folder
  }
  const std::string message = "cannot create " + what + " " + dir + ": " + ec.message();
  const int e = ec.value();
  if (ec.category() == std::generic_category() || ec.category() == std::system_category()) {
    if (e == ENOSPC || e == EDQUOT || e == EROFS || e == EIO || e == EFBIG) throw IoError(message);
  }
  throw ConfigError(message);
}

void remove_atomic_leftovers(const std::string& path) {
  const fs::path p(path);
  const std::string prefix = temp_prefix(p.filename().string());
  std::error_code ec;
  for (fs::directory_iterator it(p.parent_path().empty() ? "." : p.parent_path(), ec), end;
       !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    // Only `.tmp.<digits>`: a file someone else named alike is not ours.
    if (name.find_first_not_of("0123456789", prefix.size()) != std::string::npos) continue;
    std::error_code ignored;  // a leftover that cannot go is harmless
    fs::remove(it->path(), ignored);
  }
}

FolderLock::FolderLock(const std::string& dir, const std::string& name,
                       const std::string& command)
    : path_((fs::path(dir) / name).string()) {
  // The file is removed when the lock ends (no `.bitlab.lock` is left in a
  // finished folder), so a process may open the file just before its holder
  // removes it and lock a file no longer at the path. A lock counts only
  // when the locked file is still the one at the path: otherwise try again.
  for (int attempt = 0;; ++attempt) {
    // O_CLOEXEC: a sweep's children must not inherit (and so keep) the lock.
    fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      throw ConfigError("cannot lock " + dir + " (" + path_ + ": " + std::strerror(errno) + ")");
    }
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      char holder[512] = {0};
      const ssize_t got = pread(fd_, holder, sizeof holder - 1, 0);
      std::string who =
          got > 0 ? std::string(holder, static_cast<size_t>(got)) : "another process";
      while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
      close(fd_);
      fd_ = -1;
      throw ConfigError(dir + " is being written by " + who +
                        "; wait for it to end or stop it, then try again");
    }
    struct stat held {}, at_path {};
    if (fstat(fd_, &held) == 0 && stat(path_.c_str(), &at_path) == 0 &&
        held.st_dev == at_path.st_dev && held.st_ino == at_path.st_ino) {
      break;
    }
    close(fd_);  // the holder removed it meanwhile: the path's file is the lock now
    fd_ = -1;
    if (attempt >= 100) throw ConfigError("cannot lock " + dir + " (" + path_ + " keeps changing)");
  }
  const std::string me = "process " + std::to_string(getpid()) + " (" + command + ")\n";
  if (ftruncate(fd_, 0) != 0 || pwrite(fd_, me.data(), me.size(), 0) < 0) {
    // The lock holds without the note; a second process is then told less.
  }
}

FolderLock::~FolderLock() {
  if (fd_ < 0) return;
  // Removed while still held (see the constructor), then released. A killed
  // process leaves the file; the next lock of the folder takes it over and
  // removes it in turn.
  unlink(path_.c_str());
  close(fd_);
}

}  // namespace bitlab
