// Helpers the adapter's files (plugins/slurm_adapter*.cc) share.  Not part
// of the adapter's interface: no file outside the adapter includes this.
#ifndef PLANC_PLUGINS_SLURM_ADAPTER_INTERNAL_H_
#define PLANC_PLUGINS_SLURM_ADAPTER_INTERNAL_H_

#include "plugins/slurm_compat.h"

#include <cstring>
#include <initializer_list>
#include <string>

#include "common/job_marks.h"
#include "common/market.h"
#include "common/tier.h"

namespace planc::slurm::internal {

// A C string from Slurm, "" for nullptr.
inline std::string str(const char* s) { return s ? std::string(s) : std::string(); }

// The GPU type the first of a request's TRES strings that names one names
// (common/market.h gpu_type_of), "" for none.
inline std::string requested_gpu_type(std::initializer_list<const char*> tres) {
  for (const char* t : tres)
    if (t)
      if (std::string type = gpu_type_of(t); !type.empty()) return type;
  return "";
}

// Whether the job carries the free-attempt mark (common/job_marks.h).
inline bool marked(const job_record_t* job) {
  return job->admin_comment && has_free_attempt_mark(job->admin_comment);
}

// The tier a running job counts in for the spot cap: a free attempt in the
// tier it came from.
inline TierId counted_tier(const job_record_t* job, TierId tier) {
  if (!marked(job)) return tier;
  auto ft = free_attempt_tiers(job->admin_comment);
  return ft ? ft->first : tier;
}

// fn(state) for each "gpu" entry of a gres list that has data: a node's
// gres_list (State = gres_node_state_t) or a job's gres_list_req or
// gres_list_alloc (State = gres_job_state_t).  REQUIRES the lock of
// whatever holds the list.
template <class State, class Fn>
void for_each_gpu_gres(List list, Fn&& fn) {
  if (!list) return;
  ListIterator it = list_iterator_create(list);
  while (auto* g = static_cast<gres_state_t*>(list_next(it)))
    if (g->gres_name && std::strcmp(g->gres_name, "gpu") == 0 && g->gres_data)
      fn(*static_cast<const State*>(g->gres_data));
  list_iterator_destroy(it);
}

}  // namespace planc::slurm::internal

#endif  // PLANC_PLUGINS_SLURM_ADAPTER_INTERNAL_H_
