// Small POSIX file helpers shared by the plugins' state and spool files and
// the benchmarks.  Pure (no Slurm); thread-safe (no shared state).
#ifndef PLANC_COMMON_FILE_UTIL_H_
#define PLANC_COMMON_FILE_UTIL_H_

#include <string_view>

namespace planc {

// Writes all of `data` to `fd`, retrying short writes and EINTR.  False on
// any other error (errno says which).
bool write_all(int fd, std::string_view data);

}  // namespace planc

#endif  // PLANC_COMMON_FILE_UTIL_H_
