// Line records of Plan C's append-only files (the jobcomp spool, the
// run-start journal): one record per line, fields separated by tabs with
// \\, \t, \n and \r escaped, a version tag first and a CRC-32 of the rest
// last, so a torn or corrupt line is recognised, never misread.  A field
// may hold any bytes (a job name with newlines and tabs stays one field).
//
// Pure; thread-safe (no shared state).
#ifndef PLANC_COMMON_RECORD_H_
#define PLANC_COMMON_RECORD_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace planc {

// Appends `v` with backslash, tab, newline and carriage return escaped as
// \\ \t \n \r: the records' field encoding, and PostgreSQL COPY's text format.
void append_escaped(std::string& out, std::string_view v);

// The CRC-32 (IEEE) each record ends with, as 8 hex digits.
uint32_t record_crc32(std::string_view s);

// Builds one record: RecordWriter("planc-seg-2").add(...).add(...).line().
class RecordWriter {
 public:
  explicit RecordWriter(std::string_view version) : body_(version) {}
  RecordWriter& add(std::string_view v);
  RecordWriter& add(int64_t v) { return add(std::string_view(std::to_string(v))); }
  // The record with its CRC and the final newline.
  std::string line() const;

 private:
  std::string body_;
};

// One record read back: checked against its CRC, split and unescaped.
// fields()[0] is the version tag.
class RecordReader {
 public:
  // Fails with "no checksum (torn record)" or "checksum mismatch".
  static Result<RecordReader> parse(std::string_view line);
  size_t size() const { return ends_.size(); }
  std::string_view str(size_t i) const;
  // Field i as a whole decimal integer; false if it is not one.
  bool num(size_t i, int64_t* v) const;

 private:
  std::string text_;          // every field unescaped, one after the other
  std::vector<size_t> ends_;  // field i ends at ends_[i] in text_
};

}  // namespace planc

#endif  // PLANC_COMMON_RECORD_H_
