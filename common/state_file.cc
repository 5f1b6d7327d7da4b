#include "common/state_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace planc {
namespace {

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string sys_error(const char* what, const std::string& path) {
  return std::string(what) + " " + path + ": " + std::strerror(errno);
}

}  // namespace

std::string frame_state(std::string_view header, std::string_view body, size_t records) {
  return std::string(header) + "\n" + std::string(body) + "end " + std::to_string(records) + " " +
         hex16(fnv1a(body)) + "\n";
}

Result<std::string_view> unframe_state(std::string_view text, std::string_view header,
                                       uint64_t* records) {
  using R = Result<std::string_view>;
  if (text.substr(0, header.size()) != header || text.size() <= header.size() ||
      text[header.size()] != '\n')
    return R::failure("bad header (expected '" + std::string(header) + "')");
  std::string_view rest = text.substr(header.size() + 1);
  size_t end_pos = rest.rfind("end ");
  if (end_pos == std::string_view::npos || (end_pos != 0 && rest[end_pos - 1] != '\n'))
    return R::failure("truncated (no trailer line)");
  std::string_view body = rest.substr(0, end_pos);
  std::string_view trailer = rest.substr(end_pos);
  if (trailer.empty() || trailer.back() != '\n') return R::failure("truncated trailer");
  auto tw = split_words(trailer.substr(0, trailer.size() - 1));
  if (tw.size() != 3 || !parse_u64(tw[1], records) || tw[2].size() != 16)
    return R::failure("malformed trailer");
  if (tw[2] != hex16(fnv1a(body)))
    return R::failure("checksum mismatch (corrupt or partly written)");
  return body;
}

std::optional<std::vector<std::string_view>> split_lines(std::string_view body) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t nl = body.find('\n', pos);
    if (nl == std::string_view::npos) return std::nullopt;
    out.push_back(body.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

std::vector<std::string_view> split_words(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

bool parse_u64(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    uint64_t next = v * 10 + static_cast<uint64_t>(c - '0');
    if (next / 10 != v) return false;
    v = next;
  }
  *out = v;
  return true;
}

std::optional<std::string> write_file_atomically(const std::string& path, std::string_view text,
                                                 Durability d) {
  std::string tmp = path + ".new";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return sys_error("cannot write", tmp);
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = write(fd, text.data() + off, text.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string e = sys_error("write", tmp);
      close(fd);
      return e;
    }
    off += static_cast<size_t>(n);
  }
  if (d == Durability::kSync && fsync(fd) != 0) {
    std::string e = sys_error("fsync", tmp);
    close(fd);
    return e;
  }
  if (close(fd) != 0) return sys_error("close", tmp);
  if (d == Durability::kNoSync) {
    // Exchanged, not renamed over: ext4 (auto_da_alloc, its default) writes
    // a file's data out when it is renamed over an existing file, which is
    // most of a snapshot's cost on a disk (issue 13's bench).  The old
    // snapshot, now at `tmp`, is unlinked; a snapshot replaced within the
    // kernel's writeback delay never reaches the disk at all.  No old file
    // yet, or a file system without RENAME_EXCHANGE: a plain rename.
    if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0) {
      if (unlink(tmp.c_str()) != 0 && errno != ENOENT) return sys_error("unlink", tmp);
      return std::nullopt;
    }
    if (errno != ENOENT && errno != EINVAL && errno != ENOSYS)
      return sys_error("rename (exchange)", tmp);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) return sys_error("rename", tmp);
  if (d == Durability::kNoSync) return std::nullopt;
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return std::nullopt;
}

Result<std::string> read_state_file(const std::string& path) {
  using R = Result<std::string>;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return R::failure(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kUnreadable,
                      sys_error("cannot open", path));
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      R r = R::failure(ErrorCode::kUnreadable, sys_error("cannot read", path));
      close(fd);
      return r;
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

Result<std::string> move_aside(const std::string& path, time_t now) {
  std::string to = path + ".bad-" + std::to_string(static_cast<long long>(now));
  if (rename(path.c_str(), to.c_str()) != 0)
    return Result<std::string>::failure(ErrorCode::kUnreadable, sys_error("cannot rename", path));
  return to;
}

}  // namespace planc
