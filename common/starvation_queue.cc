#include "common/starvation_queue.h"

#include <algorithm>
#include <utility>

namespace planc {

time_t starvation_due(const PlancConfig& cfg, const PendingJob& job, time_t now,
                      uint64_t cap_gpus) {
  const time_t after = starve_after_seconds(cfg, job.tier);
  // Held back by its own reason, or starved but larger than the free
  // attempts' whole share (it waits in its tier: common/starvation.h):
  // looked at again a while on.
  if (!reason_counts(job.reason) || job.eligible_since <= 0 ||
      (job.gpus > cap_gpus && is_starving(cfg, job, now)))
    return now + std::min(StarvationQueue::kRecheckSeconds, after + 1);
  // is_starving: more than StarveAfter seconds after its eligible time.  A
  // job that has starved but was not upgraded stays due at that time, so it
  // keeps its place among the longest waiting.
  return job.eligible_since + after + 1;
}

time_t starvation_due_running(const PlancConfig& cfg, TierId tier, time_t now) {
  return now + static_cast<time_t>(starve_after_seconds(cfg, tier)) + 1;
}

bool StarvationQueue::walk_due(time_t now, uint32_t next_id, uint32_t first_job_id,
                               uint32_t max_job_id) const {
  if (!known_ || now < last_walk_ || now - last_walk_ >= kWalkSeconds) return true;
  return !new_ids_to_look_up(seen_high_, next_id, first_job_id, max_job_id, kMaxNewIds);
}

std::vector<IdRange> StarvationQueue::new_ids(uint32_t next_id, uint32_t first_job_id,
                                              uint32_t max_job_id) const {
  return new_id_ranges(seen_high_, next_id, first_job_id, max_job_id);
}

void StarvationQueue::walked(time_t now, uint32_t next_id, const std::vector<Entry>& jobs,
                             const std::vector<uint32_t>& marked) {
  by_due_.clear();
  due_of_.clear();
  due_of_.reserve(jobs.size());
  for (const Entry& e : jobs) schedule(e.job_id, e.due);
  marked_now(marked);
  known_ = true;
  last_walk_ = now;
  looked(next_id);
}

std::vector<uint32_t> StarvationQueue::take_due(time_t now, size_t limit) {
  std::vector<uint32_t> out;
  auto end = by_due_.upper_bound(now);
  auto it = by_due_.begin();
  for (; it != end && out.size() < limit; ++it) {
    out.push_back(it->second);
    due_of_.erase(it->second);
  }
  by_due_.erase(by_due_.begin(), it);
  return out;
}

void StarvationQueue::schedule(uint32_t job_id, time_t due) {
  auto [it, added] = due_of_.try_emplace(job_id, due);
  if (!added) {
    if (it->second == due) return;
    auto range = by_due_.equal_range(it->second);
    for (auto j = range.first; j != range.second; ++j)
      if (j->second == job_id) {
        by_due_.erase(j);
        break;
      }
    it->second = due;
  }
  by_due_.emplace(due, job_id);
}

}  // namespace planc
