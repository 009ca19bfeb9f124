// Small file helpers shared by the layers that write results folders.
#pragma once

#include <stdexcept>
#include <string>

namespace bitlab {

// A write the system refused (a full disk, a file size limit, a read-only or
// vanished folder): the results could not be written. The command line ends
// with exit status 4 and this message, never "internal error"; the Python
// package raises OSError.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writes `text` to `path` through a temporary file and a rename, so a reader
// never sees half a file. Throws IoError (and leaves neither `path` changed
// nor the temporary file) when the system refuses the write.
void write_text_atomic(const std::string& path, const std::string& text);

// Makes `dir` and its parents. A refusal for want of room or a writable
// disk (no space, quota, read-only file system, an I/O error) throws IoError
// (exit 4); any other (a path through a file, no permission) is bad input:
// ConfigError (exit 2). `what` names the folder's role ("results folder").
void create_folder(const std::string& dir, const std::string& what);

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
