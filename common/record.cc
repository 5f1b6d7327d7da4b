#include "common/record.h"

#include <array>
#include <charconv>
#include <cstdio>

namespace planc {

uint32_t record_crc32(std::string_view s) {
  // Slicing by 8 (Intel's, as zlib without its vector unit): eight bytes a
  // step through eight tables; the same CRC as one byte at a time.
  static const auto tables = [] {
    std::array<std::array<uint32_t, 256>, 8> t{};
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
      for (size_t k = 1; k < 8; k++) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
    return t;
  }();
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size();
  uint32_t c = 0xffffffffu;
  for (; n >= 8; p += 8, n -= 8) {
    const uint32_t lo =
        c ^ (uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24);
    c = tables[7][lo & 0xff] ^ tables[6][(lo >> 8) & 0xff] ^ tables[5][(lo >> 16) & 0xff] ^
        tables[4][lo >> 24] ^ tables[3][p[4]] ^ tables[2][p[5]] ^ tables[1][p[6]] ^ tables[0][p[7]];
  }
  for (; n > 0; p++, n--) c = tables[0][(c ^ *p) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

namespace {
bool needs_escape(char c) { return c == '\\' || c == '\t' || c == '\n' || c == '\r'; }
}  // namespace

void append_escaped(std::string& out, std::string_view v) {
  // Runs of plain characters are appended whole.
  size_t i = 0;
  while (i < v.size()) {
    size_t j = i;
    while (j < v.size() && !needs_escape(v[j])) j++;
    out.append(v.data() + i, j - i);
    if (j == v.size()) break;
    const char c = v[j];
    out += '\\';
    out += c == '\t' ? 't' : c == '\n' ? 'n' : c == '\r' ? 'r' : '\\';
    i = j + 1;
  }
}

RecordWriter& RecordWriter::add(std::string_view v) {
  body_ += '\t';
  append_escaped(body_, v);
  return *this;
}

std::string RecordWriter::line() const {
  char crc[16];
  std::snprintf(crc, sizeof crc, "\t%08x\n", record_crc32(body_));
  return body_ + crc;
}

Result<RecordReader> RecordReader::parse(std::string_view line) {
  using R = Result<RecordReader>;
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  size_t tab = line.rfind('\t');
  if (tab == std::string_view::npos || line.size() - tab != 9)
    return R::failure("no checksum (torn record)");
  std::string_view body = line.substr(0, tab);
  char want[9];
  std::snprintf(want, sizeof want, "%08x", record_crc32(body));
  if (line.substr(tab + 1) != want) return R::failure("checksum mismatch");
  // The fields unescaped into one buffer, each its end offset in it.
  RecordReader r;
  r.text_.reserve(body.size());
  size_t i = 0;
  while (i < body.size()) {
    size_t j = i;
    while (j < body.size() && body[j] != '\t' && body[j] != '\\') j++;
    r.text_.append(body.data() + i, j - i);
    if (j == body.size()) break;
    if (body[j] == '\t') {
      r.ends_.push_back(r.text_.size());
      i = j + 1;
    } else if (j + 1 < body.size()) {
      const char n = body[j + 1];
      r.text_ += n == 't' ? '\t' : n == 'n' ? '\n' : n == 'r' ? '\r' : n;
      i = j + 2;
    } else {  // a backslash at the very end stands for itself
      r.text_ += '\\';
      i = j + 1;
    }
  }
  r.ends_.push_back(r.text_.size());
  return r;
}

std::string_view RecordReader::str(size_t i) const {
  const size_t begin = i ? ends_[i - 1] : 0;
  return std::string_view(text_).substr(begin, ends_[i] - begin);
}

bool RecordReader::num(size_t i, int64_t* v) const {
  const std::string_view s = str(i);
  auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace planc
