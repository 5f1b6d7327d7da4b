#include "common/run_journal.h"

#include <algorithm>
#include <charconv>
#include <ctime>

#include "common/preempt_policy.h"  // format_utc

namespace planc {
namespace {

constexpr int64_t kDay = 86400;
constexpr std::string_view kSuffix = ".starts";

int64_t floor_day(int64_t t) { return t - ((t % kDay) + kDay) % kDay; }

std::string day_name(int64_t t) {
  std::string iso = format_utc(static_cast<time_t>(t));  // 2026-11-30T...
  return iso.substr(0, 4) + iso.substr(5, 2) + iso.substr(8, 2) + std::string(kSuffix);
}

}  // namespace

std::string journal_file_name(int64_t unix_time) { return day_name(unix_time); }

std::vector<std::string> journal_files_for(int64_t start, int64_t end) {
  std::vector<std::string> out;
  for (int64_t d = floor_day(start) - kDay; d <= floor_day(end) + kDay; d += kDay)
    out.push_back(day_name(d));
  return out;
}

bool journal_file_expired(std::string_view name, int64_t now) {
  // YYYYMMDD.starts, nothing else.
  if (name.size() != 8 + kSuffix.size() || name.substr(8) != kSuffix) return false;
  int y = 0, m = 0, d = 0;
  auto num = [&](size_t at, size_t len, int* v) {
    auto r = std::from_chars(name.data() + at, name.data() + at + len, *v);
    return r.ec == std::errc() && r.ptr == name.data() + at + len;
  };
  if (!num(0, 4, &y) || !num(4, 2, &m) || !num(6, 2, &d)) return false;
  struct tm tm = {};
  tm.tm_year = y - 1900;
  tm.tm_mon = m - 1;
  tm.tm_mday = d;
  int64_t day = timegm(&tm);
  return day + (kJournalKeepDays + 1) * kDay <= now;
}

JournalRead read_journal(std::string_view text) {
  JournalRead out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty()) continue;
    auto r = parse_segment(line);
    if (r.ok())
      out.starts.push_back(std::move(r).value());
    else
      out.damaged++;
  }
  return out;
}

std::vector<Segment> unrecorded_starts(const std::vector<Segment>& journal,
                                       const std::set<RunKey>& known, int64_t from, int64_t to) {
  std::vector<Segment> out;
  std::set<RunKey> seen;
  for (const Segment& r : journal) {
    if (r.start_time < from || r.start_time > to) continue;
    RunKey k{r.cluster, r.job_id, r.start_time};
    if (known.count(k) || !seen.insert(k).second) continue;
    out.push_back(r);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Segment& a, const Segment& b) { return a.start_time < b.start_time; });
  return out;
}

}  // namespace planc
