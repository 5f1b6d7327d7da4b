#include "common/record.h"

#include <array>
#include <charconv>
#include <cstdio>

namespace planc {

uint32_t record_crc32(std::string_view s) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xffffffffu;
  for (unsigned char ch : s) c = table[(c ^ ch) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

void append_escaped(std::string& out, std::string_view v) {
  for (char c : v) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        out += c;
    }
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
  RecordReader r;
  std::string cur;
  for (size_t i = 0; i < body.size(); i++) {
    char c = body[i];
    if (c == '\t') {
      r.fields_.push_back(std::move(cur));
      cur.clear();
    } else if (c == '\\' && i + 1 < body.size()) {
      char n = body[++i];
      cur += n == 't' ? '\t' : n == 'n' ? '\n' : n == 'r' ? '\r' : n;
    } else {
      cur += c;
    }
  }
  r.fields_.push_back(std::move(cur));
  return r;
}

bool RecordReader::num(size_t i, int64_t* v) const {
  const std::string& s = fields_[i];
  auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace planc
