#include "common/append_file.h"

#include <cerrno>
#include <utility>

namespace planc {

Result<AppendFile> open_append_file(FileSystem& fs, const std::string& path) {
  int fd = fs.open_append(path);
  if (fd < 0) {
    int err = errno;
    return Result<AppendFile>::failure(error_code_of_errno(err),
                                       system_error("cannot create", path, err));
  }
  AppendFile f;
  f.path = path;
  f.fd = fd;
  return f;
}

Result<bool> append_record(FileSystem& fs, AppendFile& file, std::string_view line) {
  off_t at = fs.end_of(file.fd);
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = fs.write(file.fd, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      // Cut back the part that was written; should that fail too, the
      // fragment has no checksum and a reader skips it.
      if (at >= 0 && off > 0) fs.ftruncate(file.fd, at);
      return Result<bool>::failure(error_code_of_errno(err),
                                   system_error("cannot append to", file.path, err));
    }
    off += static_cast<size_t>(n);
  }
  file.appended += line.size();
  return true;
}

Result<bool> close_append_file(FileSystem& fs, AppendFile& file, bool sync) {
  if (!file.is_open()) return true;
  std::string err;
  int code = 0;
  if (sync && fs.fsync(file.fd) != 0)
    code = errno, err = system_error("cannot fsync", file.path, code);
  if (fs.close(file.fd) != 0 && err.empty())
    code = errno, err = system_error("cannot close", file.path, code);
  file.fd = -1;
  if (!err.empty()) return Result<bool>::failure(error_code_of_errno(code), err);
  return true;
}

Result<bool> RecordAppender::append(std::string line) {
  if (!file_.is_open() || !waiting_.empty()) {
    waiting_.push_back(std::move(line));
    return Result<bool>::failure(
        ErrorCode::kRetryable,
        !file_.is_open() ? "no file open" : "earlier records are still waiting to be written");
  }
  auto r = append_record(*fs_, file_, line);
  if (!r.ok()) waiting_.push_back(std::move(line));
  return r;
}

Result<bool> RecordAppender::flush_waiting() {
  if (waiting_.empty()) return true;
  if (!file_.is_open()) return Result<bool>::failure(ErrorCode::kRetryable, "no file open");
  while (!waiting_.empty()) {
    auto r = append_record(*fs_, file_, waiting_.front());
    if (!r.ok()) return r;
    waiting_.pop_front();
  }
  return true;
}

AppendFile RecordAppender::replace(AppendFile next) {
  return std::exchange(file_, std::move(next));
}

AppendFile RecordAppender::release(size_t* lost, std::string* problem) {
  *lost = 0;
  problem->clear();
  if (auto r = flush_waiting(); !r.ok()) {
    *lost = waiting_.size();
    *problem = r.error();
    waiting_.clear();
  }
  return replace({});
}

std::deque<std::string> RecordAppender::take_waiting() { return std::exchange(waiting_, {}); }

void RecordAppender::put_back(std::deque<std::string> lines) {
  // Older than anything appended meanwhile: in front.
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) waiting_.push_front(std::move(*it));
}

}  // namespace planc
