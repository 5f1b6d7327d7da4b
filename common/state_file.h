// Self-checking state files under StateSaveLocation, shared by the Plan C
// plugins' ledgers.
//
// Layout: a header line naming the format, the body (one record a line),
// and a trailer "end <records> <fnv1a-64 of the body, 16 hex digits>", so a
// truncated or corrupt file is detected and never half-read.
// write_file_atomically() writes <path>.new, fsyncs it, renames it over
// <path> and fsyncs the directory: a crash leaves the old or the new file,
// never a mix.  Plain POSIX, no Slurm; call it outside every lock.
#ifndef PLANC_COMMON_STATE_FILE_H_
#define PLANC_COMMON_STATE_FILE_H_

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace planc {

// header + "\n" + body + trailer.  `body` is lines ending in '\n'.
std::string frame_state(std::string_view header, std::string_view body, size_t records);

// The body of a framed file, after checking header, trailer and checksum;
// `*records` gets the trailer's record count.  Errors name what is wrong.
Result<std::string_view> unframe_state(std::string_view text, std::string_view header,
                                       uint64_t* records);

// The lines of a body, without their '\n'; nullopt when the last line has
// none (a body from unframe_state() always ends in one unless corrupt).
std::optional<std::vector<std::string_view>> split_lines(std::string_view body);
// Splits on blanks.
std::vector<std::string_view> split_words(std::string_view line);
// A decimal number without sign; false on anything else or overflow.
bool parse_u64(std::string_view s, uint64_t* out);

// The whole file.  ErrorCode::kNotFound when it does not exist (a first
// start); kUnreadable when it exists but cannot be read (permissions, an
// I/O error, a directory in its place): never to be taken for a first
// start.  The message names the path and the system's error.
Result<std::string> read_state_file(const std::string& path);

// A state file that could not be used (unreadable or corrupt) is renamed
// to <path>.bad-<unix time> so the next save does not overwrite what an
// admin may want to look at.  Returns the new name, or the error.
Result<std::string> move_aside(const std::string& path, time_t now);

// A plugin's state at start, from its state file:
//   - no file: `fresh()`, a first start (problem empty);
//   - a file that cannot be read, or that `parse` rejects: `fresh()`, the
//     file moved aside (move_aside), and `problem` says so for the error
//     log, ending with `consequence` ("the per-job cap restarts from
//     zero");
//   - else what `parse` made of it.
template <class T>
struct LoadedState {
  T value;
  std::string problem;  // empty: nothing to report
};
template <class T, class Parse, class Fresh>
LoadedState<T> load_state_file(const std::string& path, time_t now, Parse parse, Fresh fresh,
                               std::string_view consequence) {
  Result<std::string> text = read_state_file(path);
  if (!text.ok() && text.code() == ErrorCode::kNotFound) return {fresh(), ""};
  std::string problem;
  if (!text.ok()) {
    problem = path + " is unreadable (" + text.error() + ")";
  } else {
    Result<T> r = parse(text.value());
    if (r.ok()) return {std::move(r).value(), ""};
    problem = path + " is corrupt (" + r.error() + ")";
  }
  Result<std::string> aside = move_aside(path, now);
  problem += aside.ok() ? "; moved aside to " + aside.value()
                        : "; could not move it aside (" + aside.error() + ")";
  problem += "; " + std::string(consequence);
  return {fresh(), problem};
}

// Empty on success, else the error ("rename /x/y.new: No space left ...").
// kNoSync skips both fsyncs: readers still see the old file or the new one,
// but a power loss may leave neither written out (for files rewritten every
// few seconds that nothing needs after a crash: the metrics snapshots).
enum class Durability : uint8_t { kSync, kNoSync };
std::optional<std::string> write_file_atomically(const std::string& path, std::string_view text,
                                                 Durability d = Durability::kSync);

}  // namespace planc

#endif  // PLANC_COMMON_STATE_FILE_H_
