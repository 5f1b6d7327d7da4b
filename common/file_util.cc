#include "common/file_util.h"

#include <sys/types.h>
#include <unistd.h>

#include <cerrno>

namespace planc {

bool write_all(int fd, std::string_view data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

bool append_record(int fd, std::string_view line) {
  off_t at = lseek(fd, 0, SEEK_END);
  if (write_all(fd, line)) return true;
  int saved = errno;
  if (at >= 0 && ftruncate(fd, at) != 0) { /* a CRC still rejects the fragment */ }
  errno = saved;
  return false;
}

}  // namespace planc
