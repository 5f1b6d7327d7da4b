// Small POSIX file helpers shared by the plugins' state and spool files and
// the benchmarks.  Pure (no Slurm); thread-safe (no shared state).
#ifndef PLANC_COMMON_FILE_UTIL_H_
#define PLANC_COMMON_FILE_UTIL_H_

#include <string_view>

namespace planc {

// Writes all of `data` to `fd`, retrying short writes and EINTR.  False on
// any other error (errno says which).
bool write_all(int fd, std::string_view data);

// Appends one record to an append-only file with one write(2) (all of it,
// retrying short writes); on failure cuts the file back to where it was, so
// a partial record cannot glue itself to the next one.  False on failure
// (errno says why).  A record in the page cache survives a SIGKILL of the
// process.
bool append_record(int fd, std::string_view line);

}  // namespace planc

#endif  // PLANC_COMMON_FILE_UTIL_H_
