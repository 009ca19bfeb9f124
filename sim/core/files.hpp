// Small file helpers shared by the layers that write results folders.
#pragma once

#include <string>

namespace bitlab {

// Writes `text` to `path` through a temporary file and a rename, so a reader
// never sees half a file.
void write_text_atomic(const std::string& path, const std::string& text);

// What a process killed inside write_text_atomic(path) leaves: its temporary
// files `<path>.tmp.<pid>`. Removes them all; call it only while holding the
// folder's lock (FolderLock), so that none belongs to a live writer.
void remove_atomic_leftovers(const std::string& path);

// An exclusive lock on a results folder, held while this object lives (flock on
// `<dir>/<name>`, released by the system even when the process is killed). The
// file records the holder's process id and command, so that a second process
// is told who holds the folder. Throws ConfigError (exit 2) naming the holder
// when another process holds the lock. The file is removed when the lock ends
// (a finished folder holds no `.bitlab.lock`); a killed process leaves it, and
// the next lock takes it over.
class FolderLock {
 public:
  FolderLock(const std::string& dir, const std::string& name, const std::string& command);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace bitlab
