#include "common/preempt_budget.h"

#include <algorithm>

namespace planc {

void PreemptBudget::record(uint32_t job_id, time_t now) {
  // Kept in time order; a clock gone back inserts in place.
  auto it = std::upper_bound(started_.begin(), started_.end(), std::make_pair(now, job_id));
  started_.insert(it, {now, job_id});
}

bool PreemptBudget::unrecord(uint32_t job_id, time_t when) {
  for (auto it = started_.begin(); it != started_.end(); ++it)
    if (it->first == when && it->second == job_id) {
      started_.erase(it);
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
  const uint64_t allowed = uint64_t{percent_} * *p3_running / 100;
  const uint32_t u = used(now);
  return allowed > u ? static_cast<uint32_t>(allowed - u) : 0;
}

void PreemptBudget::prune(time_t now) {
  while (!started_.empty() && !in_window(started_.front().first, now)) started_.pop_front();
}

uint8_t victim_class_now(uint8_t tier_class, bool counts_as_p3, bool budget_spent,
                         uint8_t p2_class) {
  if (!counts_as_p3 || !budget_spent) return tier_class;
  return static_cast<uint8_t>(std::min<int>(std::max<int>(tier_class, p2_class + 1), 3));
}

}  // namespace planc
