#include "common/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace planc {

int PosixFileSystem::open_append(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
}
ssize_t PosixFileSystem::write(int fd, const char* data, size_t size) {
  return ::write(fd, data, size);
}
off_t PosixFileSystem::end_of(int fd) { return ::lseek(fd, 0, SEEK_END); }
int PosixFileSystem::ftruncate(int fd, off_t length) { return ::ftruncate(fd, length); }
int PosixFileSystem::fsync(int fd) { return ::fsync(fd); }
int PosixFileSystem::close(int fd) { return ::close(fd); }

int PosixFileSystem::fsync_dir(const std::string& dir) {
  int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d < 0) return -1;
  int r = ::fsync(d);
  int saved = errno;
  ::close(d);
  errno = saved;
  return r;
}

int PosixFileSystem::make_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) == 0) return 0;
  struct stat st;
  if (errno == EEXIST && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return 0;
  if (errno == EEXIST) errno = ENOTDIR;
  return -1;
}

namespace {
// The rest of `fd` into *out (at most `max` bytes: -1 with EFBIG past it);
// -1 with errno on failure.  Does not close it.
int read_all(int fd, std::string* out, size_t max) {
  out->clear();
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) return 0;
    out->append(buf, static_cast<size_t>(n));
    if (out->size() > max) {
      errno = EFBIG;
      return -1;
    }
  }
}
}  // namespace

int PosixFileSystem::read_file(const std::string& path, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const int rc = read_all(fd, out, SIZE_MAX);
  const int saved = errno;
  ::close(fd);
  errno = saved;
  return rc;
}

int PosixFileSystem::list_dir(const std::string& dir, std::vector<std::string>* names) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return -1;
  names->clear();
  while (dirent* e = ::readdir(d)) {
    if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
    names->emplace_back(e->d_name);
  }
  ::closedir(d);
  return 0;
}

int PosixFileSystem::unlink(const std::string& path) { return ::unlink(path.c_str()); }

PosixFileSystem& posix_file_system() {
  static PosixFileSystem fs;
  return fs;
}

std::string system_error(const char* what, const std::string& path, int err) {
  return std::string(what) + " " + path + ": " + std::strerror(err);
}

ErrorCode error_code_of_errno(int err) {
  switch (err) {
    case ENOENT:
      return ErrorCode::kNotFound;
    case EACCES:
    case EPERM:
    case EROFS:
    case ENOTDIR:
    case EISDIR:
      return ErrorCode::kUnreadable;
    default:
      return ErrorCode::kRetryable;
  }
}

}  // namespace planc

namespace planc {

std::optional<std::string> read_trusted_script(const std::string& path, std::string* out) {
  const std::string fix = ": chown root " + path + " and chmod go-w it (and its directory)";
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
  struct stat ds;
  if (::stat(dir.c_str(), &ds) != 0)
    return system_error("cannot read the directory of", path, errno);
  if (ds.st_uid != 0 || (ds.st_mode & (S_IWGRP | S_IWOTH)))
    return "Script=" + path + ": its directory " + dir + " is " +
           (ds.st_uid != 0 ? "owned by uid " + std::to_string(ds.st_uid) + ", not root"
                           : std::string("writable by group or others")) +
           ", so others could replace the script" + fix;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP)
      return "Script=" + path + " is a symbolic link: give the script's own path" + fix;
    return system_error("cannot read the pool's Script", path, errno);
  }
  struct stat st;
  std::optional<std::string> why;
  if (::fstat(fd, &st) != 0)
    why = system_error("cannot read the pool's Script", path, errno);
  else if (!S_ISREG(st.st_mode))
    why = "Script=" + path + " is not a regular file";
  else if (st.st_uid != 0)
    why = "Script=" + path + " is owned by uid " + std::to_string(st.st_uid) +
          ", not root: slurmctld runs it for the pool" + fix;
  else if (st.st_mode & (S_IWGRP | S_IWOTH))
    why = "Script=" + path + " is writable by group or others" + fix;
  if (!why && read_all(fd, out, 4u << 20) != 0)
    why = errno == EFBIG ? "Script=" + path + " is larger than 4 MiB: not a batch script"
                         : system_error("cannot read the pool's Script", path, errno);
  ::close(fd);
  return why;
}

}  // namespace planc
