// jobcomp/planc's part in `sacct -c` (plugins/jobcomp_sacct.h): the bills
// read back from PostgreSQL as jobcomp records.  Runs in the client, so it
// uses libslurm only.
#include "plugins/jobcomp_sacct.h"

#include <unistd.h>

#include <cstdlib>

#include "common/bill_schema.h"
#include "common/bill_store.h"
#include "plugins/slurm_adapter.h"

namespace planc::jobcomp {
namespace {

using planc::Bill;

char* time_str(int64_t t) {
  char buf[64];
  time_t tt = static_cast<time_t>(t);
  slurm_make_time_str(&tt, buf, sizeof buf);
  return xstrdup(buf);
}

// One bill column into the jobcomp record sacct -c prints.
void set_sacct_field(jobcomp_job_rec_t* j, planc::SacctField f, const planc::FieldValue& v) {
  using F = planc::SacctField;
  auto text = [&v] { return xstrndup(v.text().data(), v.text().size()); };
  switch (f) {
    case F::kNone:
      break;
    case F::kCluster:
      j->cluster = text();
      break;
    case F::kJobId:
      j->jobid = static_cast<uint32_t>(v.num());
      break;
    case F::kSubmit:
      if (v.num()) j->submit_time = time_str(v.num());
      break;
    case F::kStart:
      j->start_time = time_str(v.num());
      break;
    case F::kEnd:
      j->end_time = time_str(v.num());
      break;
    case F::kUid:
      j->uid = static_cast<uint32_t>(v.num());
      break;
    case F::kUser:
      j->uid_name = text();
      break;
    case F::kAccount:
      j->account = text();
      break;
    case F::kQos:
      j->qos_name = text();
      break;
    case F::kPartition:
      j->partition = text();
      break;
    case F::kNodes:
      j->nodelist = text();
      break;
    case F::kNodeCount:
      j->node_cnt = static_cast<uint32_t>(v.num());
      break;
    case F::kState:
      j->state = text();
      break;
    // The same text plain sacct prints for the run (its ExitCode rule).
    case F::kExitCode:
      j->exit_code = text();
      break;
    case F::kJobName:
      j->jobname = text();
      break;
    case F::kTresReq:
      j->tres_fmt_req_str = text();
      break;
    case F::kCpus:
      j->proc_cnt = j->max_procs = static_cast<uint32_t>(v.num());
      break;
  }
}

planc::BillFilter filter_of(const slurmdb_job_cond_t* c) {
  planc::BillFilter f;
  if (!c) return f;
  auto each = [](List list, auto fn) {
    if (!list) return;
    ListIterator it = list_iterator_create(list);
    while (void* v = list_next(it)) fn(v);
    list_iterator_destroy(it);
  };
  each(c->userid_list, [&](void* v) {
    f.uids.push_back(static_cast<uint32_t>(std::strtoul(static_cast<char*>(v), nullptr, 10)));
  });
  each(c->acct_list, [&](void* v) { f.accounts.emplace_back(static_cast<char*>(v)); });
  each(c->partition_list, [&](void* v) { f.partitions.emplace_back(static_cast<char*>(v)); });
  each(c->step_list, [&](void* v) {
    f.job_ids.push_back(static_cast<slurm_selected_step_t*>(v)->step_id.job_id);
  });
  each(c->state_list, [&](void* v) {
    uint32_t st = static_cast<uint32_t>(std::strtoul(static_cast<char*>(v), nullptr, 10));
    f.states.emplace_back(job_state_string(st));
  });
  f.start = c->usage_start;
  f.end = c->usage_end;
  return f;
}

}  // namespace

List sacct_jobs(const std::string& conninfo, slurmdb_job_cond_t* job_cond) {
  // As the user running sacct, never as slurmctld's role: row-level
  // security in PostgreSQL decides what this user may read.
  planc::BillStore store(conninfo, planc::slurm::user_name(getuid()));
  auto r = store.query(filter_of(job_cond));
  if (!r.ok()) {
    error("%s: %s (JobCompLoc='%s')", plugin_type, r.error().c_str(), conninfo.c_str());
    return nullptr;
  }
  List out = list_create(jobcomp_destroy_job);
  for (const Bill& b : r.value()) {
    auto* j = static_cast<jobcomp_job_rec_t*>(xmalloc(sizeof(jobcomp_job_rec_t)));
    // Which column shows where is the column table's (common/bill_schema.h).
    for (const planc::BillColumn& c : planc::bill_columns())
      if (c.sacct != planc::SacctField::kNone)
        set_sacct_field(j, c.sacct, planc::column_value(c, b));
    j->elapsed_time = static_cast<time_t>(b.seg.end_time - b.seg.start_time);
    list_append(out, j);
  }
  return out;
}

}  // namespace planc::jobcomp
