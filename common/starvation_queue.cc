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

namespace {

// The heap's order: the earliest due first, then the lowest job id (the
// older job of two eligible at once).  std::*_heap keep the greatest on
// top, so "less" here is "later".
bool later(const StarvationQueue::Entry& a, const StarvationQueue::Entry& b) {
  return a.due != b.due ? a.due > b.due : a.job_id > b.job_id;
}

bool id_less(const StarvationQueue::Entry& a, const StarvationQueue::Entry& b) {
  return a.job_id < b.job_id;
}

}  // namespace

void StarvationQueue::walked(time_t now, uint32_t next_id, const std::vector<Entry>& jobs,
                             const std::vector<uint32_t>& marked) {
  // Fresh arrays of the walk's size (not cleared ones): the memory follows
  // the queue down as well as up.
  std::vector<Entry> by_id(jobs);
  std::stable_sort(by_id.begin(), by_id.end(), id_less);
  // A job seen twice keeps its last due (as schedule() would).
  auto last = std::unique(by_id.rbegin(), by_id.rend(),
                          [](const Entry& a, const Entry& b) { return a.job_id == b.job_id; });
  by_id.erase(by_id.begin(), last.base());
  by_id.shrink_to_fit();
  std::vector<Entry> heap(by_id);
  std::make_heap(heap.begin(), heap.end(), later);
  by_id_.swap(by_id);
  heap_.swap(heap);
  live_ = by_id_.size();
  marked_now(marked);
  known_ = true;
  last_walk_ = now;
  looked(next_id);
}

StarvationQueue::Entry* StarvationQueue::find(uint32_t job_id) {
  auto it = std::lower_bound(by_id_.begin(), by_id_.end(), Entry{job_id, 0}, id_less);
  return it != by_id_.end() && it->job_id == job_id ? &*it : nullptr;
}

std::vector<uint32_t> StarvationQueue::take_due(time_t now, size_t limit) {
  std::vector<uint32_t> out;
  while (!heap_.empty() && heap_.front().due <= now && out.size() < limit) {
    const Entry top = heap_.front();
    std::pop_heap(heap_.begin(), heap_.end(), later);
    heap_.pop_back();
    Entry* held = find(top.job_id);
    if (!held || held->due != top.due) continue;  // stale: moved or taken
    held->due = kTaken;
    --live_;
    out.push_back(top.job_id);
  }
  compact_if_sparse();
  return out;
}

void StarvationQueue::schedule(uint32_t job_id, time_t due) {
  Entry* held = find(job_id);
  if (held && held->due == due) return;
  if (held) {
    if (held->due == kTaken) ++live_;
    held->due = due;  // its old heap entry, if any, is stale now
  } else {
    // New ids come in rising order, so this is nearly always an append.
    auto at = std::upper_bound(by_id_.begin(), by_id_.end(), Entry{job_id, 0}, id_less);
    by_id_.insert(at, Entry{job_id, due});
    ++live_;
  }
  heap_.push_back(Entry{job_id, due});
  std::push_heap(heap_.begin(), heap_.end(), later);
  compact_if_sparse();
}

void StarvationQueue::compact_if_sparse() {
  if (by_id_.size() + heap_.size() <= 4 * live_ + 1024) return;
  std::vector<Entry> by_id;
  by_id.reserve(live_);
  for (const Entry& e : by_id_)
    if (e.due != kTaken) by_id.push_back(e);
  std::vector<Entry> heap(by_id);
  std::make_heap(heap.begin(), heap.end(), later);
  by_id_.swap(by_id);
  heap_.swap(heap);
}

}  // namespace planc
