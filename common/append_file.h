// Append-only files of line records (common/record.h): the jobcomp spool
// and the run-start journal append the same way.
//
// One record is one write(2) of the whole line (a short write is finished
// with more writes); a write that fails cuts the file back to where it was,
// so a partial record never glues itself to the next one.  A record in the
// page cache survives a SIGKILL of the process.
//
// RecordAppender is the file being appended to plus the records that could
// not be written yet (disk full, I/O error), kept in memory in order until
// a retry writes them.  It is NOT thread-safe: the plugin that owns one
// holds its own mutex around every call, and the calls that do disk work
// other than the append itself (opening, fsync, closing) are free functions
// the plugin calls outside that mutex.  Pure (no Slurm).
#ifndef PLANC_COMMON_APPEND_FILE_H_
#define PLANC_COMMON_APPEND_FILE_H_

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>

#include "common/file_system.h"
#include "common/result.h"

namespace planc {

// An open append-only file.  Plain value: whoever holds it closes it.
struct AppendFile {
  std::string path;
  int fd = -1;
  uint64_t appended = 0;  // bytes appended through this handle
  bool is_open() const { return fd >= 0; }
};

// Opens (creating, mode 0600) `path` for appending.  kUnreadable with the
// system's error when it cannot.
Result<AppendFile> open_append_file(FileSystem& fs, const std::string& path);

// Appends one record (a whole line, with its '\n').  On failure the file is
// cut back to its size before the call and the error names the file and
// the system's error, coded by error_code_of_errno (ENOSPC, EIO:
// kRetryable).
Result<bool> append_record(FileSystem& fs, AppendFile& file, std::string_view line);

// fsyncs (when `sync`) and closes the file; `file` is closed afterwards in
// any case.  The error names the file.
Result<bool> close_append_file(FileSystem& fs, AppendFile& file, bool sync);

class RecordAppender {
 public:
  explicit RecordAppender(FileSystem& fs = posix_file_system()) : fs_(&fs) {}

  // One record.  ok: written.  Otherwise the record waits in memory, after
  // any already waiting (no write is tried then, so order is kept), and the
  // error says why: the write's system error, or (kRetryable) "no file
  // open" or that earlier records are waiting.  waiting() == 1 after a failure
  // means this is the first: the moment to log.
  Result<bool> append(std::string line);

  // Writes waiting records to the current file, oldest first, until one
  // fails.  ok when none is left; else the error of the write that failed.
  Result<bool> flush_waiting();

  // Makes `next` the file appended to; returns the one it replaces (the
  // caller closes it).  Waiting records stay waiting.
  AppendFile replace(AppendFile next);
  // The waiting records, now the caller's to write (e.g. into the file
  // just replaced, outside the owner's mutex); put_back() what still fails.
  std::deque<std::string> take_waiting();
  void put_back(std::deque<std::string> lines);

  // At shutdown: writes what waits (as flush_waiting), gives up what still
  // cannot be written and hands the file over (the caller closes it,
  // outside its mutex).  *lost: how many records were given up; *problem:
  // why.
  AppendFile release(size_t* lost, std::string* problem);

  const AppendFile& file() const { return file_; }
  size_t waiting() const { return waiting_.size(); }
  // Nothing appended to the current file and nothing waiting.
  bool idle() const { return file_.appended == 0 && waiting_.empty(); }

 private:
  FileSystem* fs_;
  AppendFile file_;
  std::deque<std::string> waiting_;
};

}  // namespace planc

#endif  // PLANC_COMMON_APPEND_FILE_H_
