// Which job records the starvation scan looks at, so that it need not walk
// every job record each StarvationInterval (at 100,000 pending jobs that
// walk costs a sizeable part of a main scheduler cycle every interval).
//
// A pending job of a tier that starves can starve only once it has been
// eligible for more than its tier's StarveAfter.  The queue keeps each such
// job with the earliest time it could have starved (when it is due) and the
// scan looks only at the jobs due:
//   - pending and waiting for the cluster (Resources, Priority): due when
//     its eligible time plus StarveAfter has passed;
//   - starved but not upgraded this interval (StarvationMaxPerInterval, the
//     free attempts' share): due again at once, in its place by how long it
//     has waited.  A scan takes at most kTakeAtMost jobs of those due
//     (StarvationMaxPerInterval x 4, at least 256), the longest waiting
//     first: upgrades go to the longest waiting, so a queue of 100,000
//     starved jobs costs a scan no more than a few hundred lookups;
//   - pending for a reason of its own (held, a dependency, a begin time, a
//     limit, no reason yet): due again kRecheckSeconds on, or its tier's
//     StarveAfter when that is shorter (a limit that lifts can let a job
//     that has long been eligible starve at once: it is found up to that
//     late; a release, a met dependency or a reached begin time restart
//     Slurm's accrue time);
//   - running: due StarveAfter on (it waits again only after a requeue,
//     which restarts its clock);
//   - finished, gone, or in a tier that does not starve: dropped.
// Jobs enter by:
//   - a full walk of every job record: the first scan, then every
//     kWalkSeconds, after planc.conf changed (the thresholds the due times
//     came from), and whenever more than kMaxNewIds ids were handed out
//     since the last scan; the queue becomes what the walk saw;
//   - the ids slurmctld handed out since the last scan (new_id_ranges,
//     common/job_watch.h), each looked up once.
// What only a walk sees, up to kWalkSeconds late: a pending job moved into
// a starving tier by `scontrol update`, or whose begin time was moved
// earlier.
//
// Free attempts (jobs with the free-attempt mark) are few (at most
// StarvationMaxPercent of the GPUs): kept apart and looked at every scan.
//
// Memory: two flat arrays of 16 bytes a job (by id, and a heap by due
// time and the order jobs were scheduled in), rebuilt to the walk's size
// at each walk; no allocation per job.
// At 100,000 pending jobs that is about 3 MB in two blocks, where node-based
// containers (a multimap and a hash map) took about 7.5 MB in 200,000 small
// allocations made afresh at each walk among the walk's own temporaries.
//
// Pure: no Slurm header.  Used by the one worker thread only.
#ifndef PLANC_COMMON_STARVATION_QUEUE_H_
#define PLANC_COMMON_STARVATION_QUEUE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <limits>
#include <set>
#include <vector>

#include "common/config.h"
#include "common/job_watch.h"  // IdRange, new_id_ranges
#include "common/starvation.h"

namespace planc {

// When a job of a starving tier is next due (see above), looked at `now`;
// `cap_gpus`: the free attempts' share of the GPUs (a starved job larger
// than it is looked at again like a job held back by its own reason).
time_t starvation_due(const PlancConfig& cfg, const PendingJob& job, time_t now,
                      uint64_t cap_gpus = UINT64_MAX);
// For a running one.
time_t starvation_due_running(const PlancConfig& cfg, TierId tier, time_t now);

class StarvationQueue {
 public:
  static constexpr time_t kWalkSeconds = 600;
  static constexpr time_t kRecheckSeconds = 60;
  static constexpr uint64_t kMaxNewIds = 20000;

  struct Entry {
    uint32_t job_id;
    time_t due;
  };

  // Whether this scan walks every job: nothing known yet, kWalkSeconds
  // since the last walk, the clock went back, too many new ids, or ids
  // outside FirstJobId..MaxJobId.
  bool walk_due(time_t now, uint32_t next_id, uint32_t first_job_id, uint32_t max_job_id) const;
  // The ids handed out since the last scan (when no walk is due).
  std::vector<IdRange> new_ids(uint32_t next_id, uint32_t first_job_id, uint32_t max_job_id) const;

  // After a walk at `now` that read slurmctld's next job id `next_id`:
  // the starving tiers' jobs and the marked jobs it saw.
  void walked(time_t now, uint32_t next_id, const std::vector<Entry>& jobs,
              const std::vector<uint32_t>& marked);
  // The next scan walks (planc.conf changed: the due times are stale).
  void forget() { known_ = false; }
  // After a scan without a walk: every id below `next_id` has been seen.
  void looked(uint32_t next_id) { seen_high_ = next_id ? next_id - 1 : 0; }

  // Takes the jobs due at `now`, earliest first (among equal due times in
  // the order they were scheduled: a job put back goes behind the others),
  // at most `limit`; each goes back through schedule() or leaves.
  std::vector<uint32_t> take_due(time_t now, size_t limit = SIZE_MAX);
  // How many a scan takes (see above).
  static size_t take_at_most(const PlancConfig& cfg) {
    return std::max<size_t>(static_cast<size_t>(cfg.starvation_max_per_interval) * 4, 256);
  }
  // Adds a job, or moves it, to `due`.
  void schedule(uint32_t job_id, time_t due);

  // Free attempts.
  void mark(uint32_t job_id) { marked_.insert(job_id); }
  void unmark(uint32_t job_id) { marked_.erase(job_id); }
  // Every job that carries the mark now (what a scan saw).
  void marked_now(const std::vector<uint32_t>& ids) { marked_ = {ids.begin(), ids.end()}; }
  const std::set<uint32_t>& marked() const { return marked_; }

  // The jobs held (taken ones leave until scheduled again).
  size_t size() const { return live_; }
  time_t last_walk() const { return last_walk_; }
  // Entries in the arrays, held or not (taken jobs' places by id and
  // moved jobs' old places in the heap, until they are compacted away):
  // for tests.
  size_t slots() const { return by_id_.size() + recent_.size() + heap_.size(); }
  // Ids that came in below the largest held (after the id space wrapped)
  // wait in a small sorted array of at most this many, then are merged in.
  static constexpr size_t kRecentMax = 1024;

 private:
  struct Slot {
    time_t due;
    uint32_t job_id;
    uint32_t seq;  // when it was scheduled: the order among equal due times
  };
  // A job's place by id while it is taken (not held).
  static constexpr time_t kTaken = std::numeric_limits<time_t>::min();
  // Sorted by job_id.  A taken job keeps its place (due kTaken) until the
  // next walk or compaction, so that putting it back does not move others.
  std::vector<Slot> by_id_;
  // Sorted by job_id, every id below by_id_'s last (new ids nearly always
  // come above it and are appended to by_id_).
  std::vector<Slot> recent_;
  // A min-heap by (due, seq).  An entry that is no longer its job's
  // (another seq: the job was moved or taken) is stale and skipped.
  std::vector<Slot> heap_;
  size_t live_ = 0;
  uint32_t next_seq_ = 0;
  bool known_ = false;
  time_t last_walk_ = 0;
  uint32_t seen_high_ = 0;
  std::set<uint32_t> marked_;

  Slot* find(uint32_t job_id);
  void insert(const Slot& s);
  // recent_ into by_id_.
  void merge_recent();
  // Drops taken places and stale heap entries when they outnumber the jobs
  // held, or the numbering runs out.
  void compact_if_sparse();
  // The arrays from the jobs held (`held` sorted by id), numbered afresh
  // in their order when `renumber`.
  void rebuild(std::vector<Slot> held, bool renumber);
};

}  // namespace planc

#endif  // PLANC_COMMON_STARVATION_QUEUE_H_
