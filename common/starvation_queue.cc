#include "common/starvation_queue.h"

#include <algorithm>
#include <iterator>
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

template <typename S>
bool id_less(const S& a, const S& b) {
  return a.job_id < b.job_id;
}

// The heap's order: the earliest due first, then the one scheduled first.
// std::*_heap keep the greatest on top, so "less" here is "later".
template <typename S>
bool later(const S& a, const S& b) {
  return a.due != b.due ? a.due > b.due : a.seq > b.seq;
}

// Past this, compact_if_sparse() numbers the jobs afresh.
constexpr uint32_t kSeqLimit = 0xf0000000u;

}  // namespace

void StarvationQueue::walked(time_t now, uint32_t next_id, const std::vector<Entry>& jobs,
                             const std::vector<uint32_t>& marked) {
  std::vector<Slot> held;
  held.reserve(jobs.size());
  for (uint32_t i = 0; i < jobs.size(); i++) held.push_back({jobs[i].due, jobs[i].job_id, i});
  std::stable_sort(held.begin(), held.end(), id_less<Slot>);
  // A job listed twice ends where schedule() would have put it: at its
  // last due, in its place from when it came to that due.
  size_t n = 0;
  for (const Slot& s : held) {
    if (n && held[n - 1].job_id == s.job_id) {
      if (held[n - 1].due != s.due) held[n - 1] = s;
      continue;
    }
    held[n++] = s;
  }
  held.resize(n);
  // Numbered by their place in the walk already.
  next_seq_ = static_cast<uint32_t>(jobs.size());
  rebuild(std::move(held), false);
  marked_now(marked);
  known_ = true;
  last_walk_ = now;
  looked(next_id);
}

void StarvationQueue::rebuild(std::vector<Slot> held, bool renumber) {
  if (renumber) {
    // In the heap's order, from 0.
    std::sort(held.begin(), held.end(), [](const Slot& a, const Slot& b) { return later(b, a); });
    for (uint32_t i = 0; i < held.size(); i++) held[i].seq = i;
    next_seq_ = static_cast<uint32_t>(held.size());
    std::sort(held.begin(), held.end(), id_less<Slot>);
  }
  // Fresh arrays of the queue's size: the memory follows it down as well
  // as up.
  held.shrink_to_fit();
  std::vector<Slot> heap(held);
  std::make_heap(heap.begin(), heap.end(), later<Slot>);
  by_id_.swap(held);
  heap_.swap(heap);
  std::vector<Slot>().swap(recent_);
  live_ = by_id_.size();
}

StarvationQueue::Slot* StarvationQueue::find(uint32_t job_id) {
  for (std::vector<Slot>* v : {&by_id_, &recent_}) {
    auto it = std::lower_bound(v->begin(), v->end(), Slot{0, job_id, 0}, id_less<Slot>);
    if (it != v->end() && it->job_id == job_id) return &*it;
  }
  return nullptr;
}

void StarvationQueue::insert(const Slot& s) {
  if (by_id_.empty() || s.job_id > by_id_.back().job_id) {
    by_id_.push_back(s);  // a new id: nearly always
    return;
  }
  recent_.insert(std::upper_bound(recent_.begin(), recent_.end(), s, id_less<Slot>), s);
  if (recent_.size() >= kRecentMax) merge_recent();
}

void StarvationQueue::merge_recent() {
  std::vector<Slot> merged;
  merged.reserve(by_id_.size() + recent_.size());
  std::merge(by_id_.begin(), by_id_.end(), recent_.begin(), recent_.end(),
             std::back_inserter(merged), id_less<Slot>);
  by_id_.swap(merged);
  recent_.clear();
}

std::vector<uint32_t> StarvationQueue::take_due(time_t now, size_t limit) {
  std::vector<uint32_t> out;
  while (!heap_.empty() && heap_.front().due <= now && out.size() < limit) {
    const Slot top = heap_.front();
    std::pop_heap(heap_.begin(), heap_.end(), later<Slot>);
    heap_.pop_back();
    Slot* held = find(top.job_id);
    if (!held || held->seq != top.seq || held->due != top.due) continue;  // stale
    held->due = kTaken;
    --live_;
    out.push_back(top.job_id);
  }
  compact_if_sparse();
  return out;
}

void StarvationQueue::schedule(uint32_t job_id, time_t due) {
  Slot* held = find(job_id);
  if (held && held->due == due) return;  // keeps its place
  const Slot s{due, job_id, next_seq_++};
  if (held) {
    if (held->due == kTaken) ++live_;
    *held = s;  // its old heap entry, if any, is stale now
  } else {
    insert(s);
    ++live_;
  }
  heap_.push_back(s);
  std::push_heap(heap_.begin(), heap_.end(), later<Slot>);
  compact_if_sparse();
}

void StarvationQueue::compact_if_sparse() {
  if (slots() <= 4 * live_ + 1024 && next_seq_ < kSeqLimit) return;
  merge_recent();
  std::vector<Slot> held;
  held.reserve(live_);
  std::copy_if(by_id_.begin(), by_id_.end(), std::back_inserter(held),
               [](const Slot& s) { return s.due != kTaken; });
  rebuild(std::move(held), true);
}

}  // namespace planc
