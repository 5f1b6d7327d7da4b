#include "common/spool.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace planc {

Spool::Spool(std::string dir, FileSystem& fs) : dir_(std::move(dir)), fs_(&fs) {}

std::string Spool::path(uint64_t seq) const {
  char name[32];
  std::snprintf(name, sizeof name, "%012llu.spool", static_cast<unsigned long long>(seq));
  return dir_ + "/" + name;
}

Result<bool> Spool::make_dir() const {
  if (fs_->make_dir(dir_) == 0) return true;
  int err = errno;
  return Result<bool>::failure(error_code_of_errno(err), system_error("cannot create", dir_, err));
}

Result<std::vector<uint64_t>> Spool::pending() const {
  std::vector<std::string> names;
  if (fs_->list_dir(dir_, &names) != 0) {
    int err = errno;
    return Result<std::vector<uint64_t>>::failure(error_code_of_errno(err),
                                                  system_error("cannot list", dir_, err));
  }
  std::vector<uint64_t> seqs;
  for (const std::string& n : names) {
    unsigned long long seq;
    int used = 0;
    // NNN.spool only: never <file>.rejected, never anything not ours.
    if (std::sscanf(n.c_str(), "%llu.spool%n", &seq, &used) == 1 &&
        used == static_cast<int>(n.size()))
      seqs.push_back(seq);
  }
  std::sort(seqs.begin(), seqs.end());
  return seqs;
}

Result<AppendFile> Spool::create(uint64_t seq) const { return open_append_file(*fs_, path(seq)); }

std::deque<std::string> Spool::finish(AppendFile file, std::deque<std::string> retry,
                                      std::string* error) const {
  std::deque<std::string> left;
  error->clear();
  for (std::string& line : retry) {
    if (!left.empty()) {  // keep their order: once one fails, the rest wait too
      left.push_back(std::move(line));
      continue;
    }
    auto r = append_record(*fs_, file, line);
    if (!r.ok()) {
      *error = r.error();
      left.push_back(std::move(line));
    }
  }
  if (auto r = close_append_file(*fs_, file, true); !r.ok() && error->empty()) *error = r.error();
  if (fs_->fsync_dir(dir_) != 0 && error->empty())
    *error = system_error("cannot fsync", dir_, errno);
  return left;
}

Result<SpoolContents> Spool::read(uint64_t seq) const {
  std::string text;
  if (fs_->read_file(path(seq), &text) != 0) {
    int err = errno;
    return Result<SpoolContents>::failure(error_code_of_errno(err) == ErrorCode::kNotFound
                                              ? ErrorCode::kNotFound
                                              : ErrorCode::kUnreadable,
                                          system_error("cannot read", path(seq), err));
  }
  SpoolContents out;
  size_t line_no = 0;
  std::string_view rest = text;
  while (!rest.empty()) {
    line_no++;
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl == std::string_view::npos ? rest.size() : nl + 1);
    rest.remove_prefix(line.size());
    auto r = parse_segment(line);
    if (!r.ok()) {
      out.damaged.push_back({line_no, r.error()});
      continue;
    }
    out.records.push_back({line_no, std::string(line), std::move(r).value()});
  }
  return out;
}

Result<bool> Spool::set_aside(uint64_t seq, std::string_view line) const {
  auto f = open_append_file(*fs_, rejected_path(seq));
  if (!f.ok()) return Result<bool>::failure(f.code(), f.error());
  AppendFile file = std::move(f).value();
  std::string whole(line);
  if (whole.empty() || whole.back() != '\n') whole += '\n';
  auto r = append_record(*fs_, file, whole);
  auto c = close_append_file(*fs_, file, true);
  if (!r.ok()) return r;
  return c;
}

Result<bool> Spool::remove(uint64_t seq) const {
  if (fs_->unlink(path(seq)) == 0 || errno == ENOENT) return true;
  int err = errno;
  return Result<bool>::failure(error_code_of_errno(err),
                               system_error("cannot remove", path(seq), err));
}

Result<SpoolStored> Spool::store(uint64_t seq, const PriceFn& price, const WriteFn& write,
                                 size_t batch) const {
  using R = Result<SpoolStored>;
  auto contents = read(seq);
  if (!contents.ok()) return R::failure(contents.code(), contents.error());
  SpoolStored done;
  done.damaged = std::move(contents.value().damaged);
  const std::vector<SpoolRecord>& records = contents.value().records;
  done.records = records.size();
  std::vector<Bill> bills;
  bills.reserve(records.size());
  for (const SpoolRecord& r : records) bills.push_back(price(r.seg));
  batch = std::max<size_t>(batch, 1);
  for (size_t i = 0; i < bills.size(); i += batch) {
    size_t end = std::min(bills.size(), i + batch);
    std::vector<Bill> part(bills.begin() + i, bills.begin() + end);
    auto w = write(part);
    if (w.ok()) {
      done.fresh += w.value();
      continue;
    }
    if (w.code() != ErrorCode::kRefused) return R::failure(w.code(), w.error());
    // A refused batch would be refused for ever: find the bills PostgreSQL
    // refuses and keep the others flowing.
    for (size_t k = i; k < end; k++) {
      auto one = write({bills[k]});
      if (one.ok()) {
        done.fresh += one.value();
        continue;
      }
      if (one.code() != ErrorCode::kRefused) return R::failure(one.code(), one.error());
      if (auto a = set_aside(seq, records[k].line); !a.ok())
        return R::failure(a.code(), "cannot set a refused bill aside: " + a.error());
      done.rejected.push_back({records[k].seg, one.error()});
    }
  }
  if (auto r = remove(seq); !r.ok()) done.remove_error = r.error();
  return done;
}

int RetryBackoff::failed(int64_t now, bool* log) {
  seconds_ = std::min(seconds_ ? seconds_ * 2 : 1, kMaxSeconds);
  *log = !logged_ || now - last_log_ >= kLogEverySeconds;
  if (*log) {
    logged_ = true;
    last_log_ = now;
  }
  return seconds_;
}

bool RetryBackoff::succeeded() {
  bool was_failing = seconds_ != 0;
  seconds_ = 0;
  return was_failing;
}

}  // namespace planc
