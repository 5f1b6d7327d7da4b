// jobcomp/planc's spool: the run segments slurmctld has ended and
// PostgreSQL has not stored yet, as files of checksummed line records
// (serialize_segment, common/billing.h) in one directory (SpoolDir,
// default <StateSaveLocation>/planc_jobcomp).
//
// Life of a file, NNNNNNNNNNNN.spool (a sequence number):
//   append   slurmctld's callback appends one record per segment through a
//            RecordAppender (common/append_file.h) holding the newest file;
//   rotate   every second the worker opens the next file (create()), swaps
//            it into the appender and closes the old one (finish(): the
//            records that could not be written earlier go into it, then
//            fsync, close, fsync of the directory);
//   store    the worker reads a closed file (read()), prices and writes its
//            bills (store()), sets the ones PostgreSQL refuses aside in
//            <file>.rejected and removes the file;
//   replay   after a restart or a crash every file left (pending()) is
//            stored the same way; the bill key makes a replay write
//            nothing twice.
// A line that fails its checksum (torn by a crash, or damaged) is reported
// (kCorrupt, with its line number) and skipped; the rest of the file is
// read.
//
// A Spool holds only its directory and file system: every method is const
// and may be called from any thread; the caller makes sure that one file is
// not closed and read at once (jobcomp/planc: only its worker does either).
// Pure (no Slurm, no database): the store is given as a function.
#ifndef PLANC_COMMON_SPOOL_H_
#define PLANC_COMMON_SPOOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/append_file.h"
#include "common/bill_schema.h"
#include "common/billing.h"
#include "common/file_system.h"
#include "common/result.h"

namespace planc {

inline constexpr const char* kSpoolDirName = "planc_jobcomp";

// One intact record of a spool file.
struct SpoolRecord {
  size_t line_no = 0;  // 1-based
  std::string line;    // as on disk, with its '\n'
  Segment seg;
};
// A line that was skipped: its number and why (checksum, version, field).
struct SpoolDamage {
  size_t line_no = 0;
  std::string error;
};
struct SpoolContents {
  std::vector<SpoolRecord> records;
  std::vector<SpoolDamage> damaged;
};

// A bill PostgreSQL refused for its data, set aside.
struct SpoolRejected {
  Segment seg;
  std::string error;  // PostgreSQL's
};

// What store() did with one file.
struct SpoolStored {
  size_t records = 0;  // intact records read
  size_t fresh = 0;    // bills PostgreSQL did not have yet
  std::vector<SpoolDamage> damaged;
  std::vector<SpoolRejected> rejected;  // now in rejected_path()
  // Set when the stored file could not be removed: its bills are stored,
  // a later replay writes nothing twice, but an admin should look.
  std::string remove_error;
};

class Spool {
 public:
  explicit Spool(std::string dir, FileSystem& fs = posix_file_system());

  const std::string& dir() const { return dir_; }
  std::string path(uint64_t seq) const;
  std::string rejected_path(uint64_t seq) const { return path(seq) + ".rejected"; }

  // Creates the directory (0700) unless it exists.  The error names it.
  Result<bool> make_dir() const;
  // Sequence numbers of the spool files in the directory, oldest first:
  // after a restart, the files to replay.
  Result<std::vector<uint64_t>> pending() const;
  // Opens file `seq` for appending (creating it).
  Result<AppendFile> create(uint64_t seq) const;
  // Closes a file taken out of the appender: first appends `retry` (the
  // records whose write failed before, in order), then fsyncs it, closes it
  // and fsyncs the directory.  Returns the records that still could not be
  // written (the caller puts them back into the appender) and, in *error,
  // why (empty when all went well).
  std::deque<std::string> finish(AppendFile file, std::deque<std::string> retry,
                                 std::string* error) const;

  // Reads closed file `seq`: every intact record, and the damaged lines.
  // kNotFound when the file is gone; kUnreadable when it cannot be read (it
  // is kept for the next try, never removed).
  Result<SpoolContents> read(uint64_t seq) const;

  // The file's text (read() and store() split and parse it).
  Result<std::string> read_text(uint64_t seq) const;

  // Keeps a refused record in rejected_path(seq) (appended, fsynced).
  Result<bool> set_aside(uint64_t seq, std::string_view line) const;
  // Removes file `seq` (gone already is fine).
  Result<bool> remove(uint64_t seq) const;

  // Stores file `seq`: read(), price() each record, write() the bills in
  // batches of `batch` (the records of `batch` lines; the next batch is
  // parsed and priced on a thread of its own while one is written, so
  // price() must be safe to call beside write()), then remove() (a file
  // that cannot be removed is stored all the same:
  // SpoolStored::remove_error says so).  write()
  // answers as BillStore::write does: the number of new bills, or an error
  // whose code decides:
  //   kRefused    the batch is written again one bill at a time and each
  //               refused bill's record is set aside (rejected_path), so
  //               the others keep flowing;
  //   otherwise   store() stops and returns that error; the file stays
  //               for the next try (what was written is written: the bill
  //               key makes the retry write nothing twice).
  // A record that cannot be set aside (disk full) is a failure too.
  // Each batch reaches write() with its COPY text made (bill_batch, with
  // `source` as the bills' source), the next made meanwhile.
  using PriceFn = std::function<Bill(Segment)>;
  using WriteFn = std::function<Result<size_t>(const BillBatch&)>;
  Result<SpoolStored> store(uint64_t seq, const PriceFn& price, const WriteFn& write, size_t batch,
                            std::string_view source) const;

 private:
  std::string dir_;
  FileSystem* fs_;
};

// The worker's wait while PostgreSQL does not answer: 1 s, then doubling
// up to 30 s; back to 1 s once a store succeeds.  The error is logged at
// most once a minute.  Not thread-safe (the worker's own).
class RetryBackoff {
 public:
  static constexpr int kMaxSeconds = 30;
  static constexpr int64_t kLogEverySeconds = 60;
  // A failure at `now`: the next wait, and whether to log this one.
  int failed(int64_t now, bool* log);
  // A success: true when it ends a run of failures (worth saying).
  bool succeeded();
  // Seconds to wait before the next try (1 when nothing failed).
  int wait_seconds() const { return seconds_ ? seconds_ : 1; }

 private:
  int seconds_ = 0;
  bool logged_ = false;
  int64_t last_log_ = 0;
};

}  // namespace planc

#endif  // PLANC_COMMON_SPOOL_H_
