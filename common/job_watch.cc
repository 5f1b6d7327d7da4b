#include "common/job_watch.h"

#include <algorithm>
#include <iterator>

namespace planc {
namespace {

void sort_unique(std::vector<uint32_t>* v) {
  std::sort(v->begin(), v->end());
  v->erase(std::unique(v->begin(), v->end()), v->end());
}

}  // namespace

std::vector<IdRange> new_id_ranges(uint32_t seen_high, uint32_t next, uint32_t first_job_id,
                                   uint32_t max_job_id) {
  std::vector<IdRange> out;
  if (next == seen_high + 1) return out;
  if (next > seen_high) {
    out.push_back({seen_high + 1, next - 1});
    return out;
  }
  // Wrapped: the rest up to MaxJobId, then from FirstJobId.
  if (seen_high + 1 < max_job_id) out.push_back({seen_high + 1, max_job_id - 1});
  if (next > first_job_id) out.push_back({first_job_id, next - 1});
  return out;
}

uint64_t id_count(const std::vector<IdRange>& ranges) {
  uint64_t n = 0;
  for (const IdRange& r : ranges) n += static_cast<uint64_t>(r.last) - r.first + 1;
  return n;
}

std::optional<std::vector<IdRange>> new_ids_to_look_up(uint32_t seen_high, uint32_t next,
                                                       uint32_t first_job_id, uint32_t max_job_id,
                                                       uint64_t at_most) {
  if (next < first_job_id || next >= max_job_id || seen_high < first_job_id ||
      seen_high >= max_job_id)
    return std::nullopt;
  std::vector<IdRange> ids = new_id_ranges(seen_high, next, first_job_id, max_job_id);
  if (id_count(ids) > at_most) return std::nullopt;
  return ids;
}

JobWatch::Plan JobWatch::plan(const std::vector<uint32_t>& started, uint32_t next_id,
                              uint32_t first_job_id, uint32_t max_job_id, bool hook_ours) const {
  Plan p;
  if (!known_ || !hook_ours) return p;
  auto new_ids = new_ids_to_look_up(seen_high_, next_id, first_job_id, max_job_id, kMaxNewIds);
  if (!new_ids) return p;
  p.new_ids = std::move(*new_ids);
  p.walk = false;
  p.ids.reserve(ids_.size() + started.size());
  p.ids = ids_;
  p.ids.insert(p.ids.end(), started.begin(), started.end());
  sort_unique(&p.ids);
  return p;
}

void JobWatch::sampled(std::vector<uint32_t> keep, uint32_t next_id) {
  sort_unique(&keep);
  ids_ = std::move(keep);
  // next_id is at least first_job_id, so next_id - 1 does not wrap below it
  // except when next_id is FirstJobId itself (seen_high_ is then out of the
  // id space and plan() walks once more).
  seen_high_ = next_id - 1;
  known_ = true;
}

void JobWatch::rescanned(std::vector<uint32_t> keep) {
  sort_unique(&keep);
  ids_ = std::move(keep);
}

}  // namespace planc
