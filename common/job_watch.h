// Which job records slurmctld/planc's 5 s sample looks at, so that it need
// not walk every job record under slurmctld's locks (issue 13: at 10,000
// pending jobs that walk cost about a main scheduler cycle every 5 s).
//
// What the sample needs is small: the running jobs of a tier (pool use,
// spot use) and the guaranteed tiers' pending jobs (the SLA).  A watched set
// of those ids is kept up to date from three sources:
//   - a full walk (the first sample, and every starvation scan, which walks
//     every job anyway) replaces the set with what the walk saw;
//   - slurmctld's job-begin hook names each job that starts (pending P2/P3
//     jobs are not watched, so this is how their starts are seen);
//   - the ids slurmctld handed out since the last sample (up to its next
//     job id, wrapping from MaxJobId to FirstJobId) are looked up once: new
//     guaranteed jobs are found that way.
// Each sample looks up the watched ids, the started ids and the new ids,
// and keeps those that are still running in a tier or pending in a
// guaranteed one.  What only a walk sees: a pending job moved into a
// guaranteed tier by `scontrol update` (seen at the next scan).
//
// It falls back to a full walk each sample when it cannot keep up: nothing
// known yet, too many new ids (more than kMaxNewIds since the last sample),
// ids outside FirstJobId..MaxJobId (a federation's), or no job-begin hook.
//
// Pure: no Slurm header.  Used by the one worker thread only.
#ifndef PLANC_COMMON_JOB_WATCH_H_
#define PLANC_COMMON_JOB_WATCH_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace planc {

// Job ids first..last, both included.
struct IdRange {
  uint32_t first = 0, last = 0;
  bool operator==(const IdRange& o) const { return first == o.first && last == o.last; }
};

// The ids slurmctld handed out after `seen_high` and before `next` (its next
// job id), in order: ids run from `first_job_id` up to `max_job_id` - 1,
// then start again at `first_job_id`.  Empty when `next` is seen_high + 1.
std::vector<IdRange> new_id_ranges(uint32_t seen_high, uint32_t next, uint32_t first_job_id,
                                   uint32_t max_job_id);
uint64_t id_count(const std::vector<IdRange>& ranges);
// new_id_ranges when they can be looked up one by one: nullopt when
// `seen_high` or `next` is outside FirstJobId..MaxJobId (a federation's
// ids, nothing seen yet) or more than `at_most` ids were handed out (the
// caller walks every job instead).
std::optional<std::vector<IdRange>> new_ids_to_look_up(uint32_t seen_high, uint32_t next,
                                                       uint32_t first_job_id, uint32_t max_job_id,
                                                       uint64_t at_most);

class JobWatch {
 public:
  static constexpr uint64_t kMaxNewIds = 20000;

  // The sample's plan: a full walk, or the ids to look up (the watched ones
  // and `started`, sorted, each once) plus `new_ids`.
  struct Plan {
    bool walk = true;
    std::vector<uint32_t> ids;
    std::vector<IdRange> new_ids;
  };
  Plan plan(const std::vector<uint32_t>& started, uint32_t next_id, uint32_t first_job_id,
            uint32_t max_job_id, bool hook_ours) const;

  // After a sample: the ids to keep watching, and slurmctld's next job id
  // when the sample read it (every id below it has been seen).
  void sampled(std::vector<uint32_t> keep, uint32_t next_id);
  // After a scan's walk: the ids it saw to keep watching (the new-id mark
  // stays: the next sample still looks up the ids handed out since).
  void rescanned(std::vector<uint32_t> keep);
  // The job-begin hook lost starts (its queue was full): walk next time.
  void lost_starts() { known_ = false; }

  size_t size() const { return ids_.size(); }

 private:
  bool known_ = false;
  uint32_t seen_high_ = 0;
  std::vector<uint32_t> ids_;  // sorted, unique
};

}  // namespace planc

#endif  // PLANC_COMMON_JOB_WATCH_H_
