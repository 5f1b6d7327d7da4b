#include "common/spool.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <future>
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

namespace {

// The lines of a spool file, each with its '\n' (the last may lack it).
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl == std::string_view::npos ? text.size() : nl + 1);
    text.remove_prefix(line.size());
    lines.push_back(line);
  }
  return lines;
}

// Lines [from, to) parsed; line numbers are 1-based.
SpoolContents parse_lines(const std::vector<std::string_view>& lines, size_t from, size_t to) {
  SpoolContents out;
  for (size_t i = from; i < to; i++) {
    auto r = parse_segment(lines[i]);
    if (!r.ok()) {
      out.damaged.push_back({i + 1, r.error()});
      continue;
    }
    out.records.push_back({i + 1, std::string(lines[i]), std::move(r).value()});
  }
  return out;
}

}  // namespace

Result<std::string> Spool::read_text(uint64_t seq) const {
  std::string text;
  if (fs_->read_file(path(seq), &text) != 0) {
    int err = errno;
    return Result<std::string>::failure(error_code_of_errno(err) == ErrorCode::kNotFound
                                            ? ErrorCode::kNotFound
                                            : ErrorCode::kUnreadable,
                                        system_error("cannot read", path(seq), err));
  }
  return text;
}

Result<SpoolContents> Spool::read(uint64_t seq) const {
  auto text = read_text(seq);
  if (!text.ok()) return Result<SpoolContents>::failure(text.code(), text.error());
  const std::vector<std::string_view> lines = split_lines(text.value());
  return parse_lines(lines, 0, lines.size());
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

namespace {

// One batch's records, parsed and priced.
struct PricedBatch {
  SpoolContents contents;
  BillBatch batch;  // batch.bills[k] is the bill of contents.records[k]
};

PricedBatch price_lines(const std::vector<std::string_view>& lines, size_t from, size_t to,
                        const Spool::PriceFn& price, std::string_view source) {
  PricedBatch out{parse_lines(lines, from, to), {}};
  std::vector<Bill> bills;
  bills.reserve(out.contents.records.size());
  for (const SpoolRecord& r : out.contents.records) bills.push_back(price(r.seg));
  out.batch = bill_batch(std::move(bills), source);
  return out;
}

}  // namespace

Result<SpoolStored> Spool::store(uint64_t seq, const PriceFn& price, const WriteFn& write,
                                 size_t batch, std::string_view source) const {
  using R = Result<SpoolStored>;
  auto text = read_text(seq);
  if (!text.ok()) return R::failure(text.code(), text.error());
  const std::vector<std::string_view> lines = split_lines(text.value());
  batch = std::max<size_t>(batch, 1);
  // The next batch is parsed, priced and made into COPY text on a thread
  // of its own while this one is written: the database's work and ours
  // overlap.  Without a thread to spare (EAGAIN) it is done here, when its
  // turn comes.
  auto stage = [&](size_t from) {
    return std::async(std::launch::async | std::launch::deferred, price_lines, std::cref(lines),
                      from, std::min(lines.size(), from + batch), std::cref(price), source);
  };
  SpoolStored done;
  std::future<PricedBatch> next;
  if (!lines.empty()) next = stage(0);
  for (size_t from = 0; from < lines.size(); from += batch) {
    PricedBatch cur = next.get();
    if (from + batch < lines.size()) next = stage(from + batch);
    for (SpoolDamage& d : cur.contents.damaged) done.damaged.push_back(std::move(d));
    const std::vector<SpoolRecord>& records = cur.contents.records;
    done.records += records.size();
    if (cur.batch.bills.empty()) continue;
    auto w = write(cur.batch);
    if (w.ok()) {
      done.fresh += w.value();
      continue;
    }
    if (w.code() != ErrorCode::kRefused) return R::failure(w.code(), w.error());
    // A refused batch would be refused for ever: find the bills PostgreSQL
    // refuses and keep the others flowing.
    for (size_t k = 0; k < cur.batch.bills.size(); k++) {
      auto one = write(bill_batch({cur.batch.bills[k]}, source));
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
