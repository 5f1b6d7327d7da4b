#include "common/preempt_budget.h"

#include <algorithm>

#include "common/state_file.h"

namespace planc {
namespace {
constexpr std::string_view kHeader = "planc-p3-budget v1";
}  // namespace

void PreemptBudget::record(uint32_t job_id, time_t now) {
  // Kept in time order; a clock gone back inserts in place.
  auto it = std::upper_bound(started_.begin(), started_.end(), std::make_pair(now, job_id));
  started_.insert(it, {now, job_id});
  dirty_ = true;
}

bool PreemptBudget::unrecord(uint32_t job_id, time_t when) {
  for (auto it = started_.begin(); it != started_.end(); ++it)
    if (it->first == when && it->second == job_id) {
      started_.erase(it);
      dirty_ = true;
      return true;
    }
  return false;
}

uint32_t PreemptBudget::used(time_t now) const {
  uint32_t n = 0;
  for (const auto& s : started_)
    if (in_window(s.first, now)) n++;
  return n;
}

std::optional<uint32_t> PreemptBudget::remaining(time_t now,
                                                 std::optional<uint32_t> p3_running) const {
  if (!enabled() || !p3_running) return std::nullopt;
  const uint64_t allowed = share(percent_, *p3_running);
  const uint32_t u = used(now);
  return allowed > u ? static_cast<uint32_t>(allowed - u) : 0;
}

bool PreemptBudget::reached(uint32_t percent, time_t now,
                            std::optional<uint32_t> p3_running) const {
  if (!enabled() || !p3_running) return false;
  return used(now) >= share(std::min(percent, percent_), *p3_running);
}

void PreemptBudget::prune(time_t now) {
  while (!started_.empty() && !in_window(started_.front().first, now)) {
    started_.pop_front();
    dirty_ = true;
  }
}

// One line a preemption: "S <when> <job id>", oldest first.
std::string PreemptBudget::serialize() {
  std::string body;
  for (const auto& [when, job] : started_)
    body += "S " + std::to_string(static_cast<int64_t>(when)) + " " + std::to_string(job) + "\n";
  dirty_ = false;
  return frame_state(kHeader, body, started_.size());
}

Result<PreemptBudget> PreemptBudget::parse(std::string_view text, uint32_t percent,
                                           uint32_t window_seconds) {
  using R = Result<PreemptBudget>;
  uint64_t records = 0;
  auto framed = unframe_state(text, kHeader, &records);
  if (!framed.ok()) return R::failure("not a valid Plan C P3 budget file: " + framed.error());
  auto lines = split_lines(framed.value());
  if (!lines) return R::failure("line without newline");
  if (lines->size() != records)
    return R::failure(std::to_string(lines->size()) + " records, the trailer says " +
                      std::to_string(records));
  PreemptBudget b(percent, window_seconds);
  size_t n = 0;
  for (std::string_view line : *lines) {
    ++n;
    auto w = split_words(line);
    uint64_t when = 0, job = 0;
    if (w.size() != 3 || w[0] != "S" || !parse_u64(w[1], &when) || when > 0x7fffffffffffULL ||
        !parse_u64(w[2], &job) || !job || job > 0xffffffffULL)
      return R::failure("bad preemption record on line " + std::to_string(n));
    b.record(static_cast<uint32_t>(job), static_cast<time_t>(when));
  }
  b.dirty_ = false;
  return b;
}

uint8_t victim_class_now(uint8_t tier_class, bool counts_as_p3, bool soft_reached,
                         uint8_t p2_class) {
  if (!counts_as_p3 || !soft_reached) return tier_class;
  return static_cast<uint8_t>(std::min<int>(std::max<int>(tier_class, p2_class + 1), 3));
}

}  // namespace planc
