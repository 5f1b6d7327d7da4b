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

// Empty on success, else the error ("rename /x/y.new: No space left ...").
std::optional<std::string> write_file_atomically(const std::string& path, std::string_view text);

}  // namespace planc

#endif  // PLANC_COMMON_STATE_FILE_H_
