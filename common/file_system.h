// The few file-system calls Plan C's append-only files make (the jobcomp
// spool, the run-start journal), behind an interface so that unit tests can
// make a write fail with ENOSPC or EIO, or come back short, without a full
// disk.  Each method is the POSIX call of the same name: it returns what
// that call returns and sets errno the same way.
//
// PosixFileSystem is the real one; posix_file_system() is a shared instance
// with no state, safe from any thread.  Pure (no Slurm).
#ifndef PLANC_COMMON_FILE_SYSTEM_H_
#define PLANC_COMMON_FILE_SYSTEM_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace planc {

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600).
  virtual int open_append(const std::string& path) = 0;
  virtual ssize_t write(int fd, const char* data, size_t size) = 0;
  // lseek(fd, 0, SEEK_END): where the next append lands.
  virtual off_t end_of(int fd) = 0;
  virtual int ftruncate(int fd, off_t length) = 0;
  virtual int fsync(int fd) = 0;
  virtual int close(int fd) = 0;
  // fsync of a directory, so that a file created or removed in it stays so.
  virtual int fsync_dir(const std::string& dir) = 0;
  // mkdir(path, 0700); 0 also when it exists as a directory.
  virtual int make_dir(const std::string& path) = 0;
  // The whole file into *out; -1 with errno on failure.
  virtual int read_file(const std::string& path, std::string* out) = 0;
  // The names in a directory (no "." or "..").
  virtual int list_dir(const std::string& dir, std::vector<std::string>* names) = 0;
  virtual int unlink(const std::string& path) = 0;
};

class PosixFileSystem : public FileSystem {
 public:
  int open_append(const std::string& path) override;
  ssize_t write(int fd, const char* data, size_t size) override;
  off_t end_of(int fd) override;
  int ftruncate(int fd, off_t length) override;
  int fsync(int fd) override;
  int close(int fd) override;
  int fsync_dir(const std::string& dir) override;
  int make_dir(const std::string& path) override;
  int read_file(const std::string& path, std::string* out) override;
  int list_dir(const std::string& dir, std::vector<std::string>* names) override;
  int unlink(const std::string& path) override;
};

PosixFileSystem& posix_file_system();

// "<what> <path>: <strerror(err)>", e.g. "cannot append to /x/1.spool: No
// space left on device".
std::string system_error(const char* what, const std::string& path, int err);

// A pool's batch script, read only when slurmctld may trust it (it runs as
// the pool's user, submitted by slurmctld itself): a regular file, not a
// symbolic link, owned by root, not writable by group or others, in a
// directory owned by root and not writable by group or others.  Read from
// the descriptor that was checked.  None on success; else what is wrong and
// what to do.
std::optional<std::string> read_trusted_script(const std::string& path, std::string* out);

// What an errno means to a caller deciding what to do (common/result.h):
// ENOENT kNotFound; permissions, a read-only file system, a file where a
// directory should be (or the reverse) kUnreadable: an admin must act;
// anything else (ENOSPC, EDQUOT, EIO, out of descriptors) kRetryable.
ErrorCode error_code_of_errno(int err);

}  // namespace planc

#endif  // PLANC_COMMON_FILE_SYSTEM_H_
