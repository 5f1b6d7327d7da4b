// preempt/planc: the Plan C preemption policy, a drop-in for preempt/qos.
//
// Slurm keeps the candidate search and the locks (src/slurmctld/preempt.c);
// this plugin answers its questions from the core (common/preempt_policy.h,
// common/preemption_tracker.h):
//   preemptable   the tier matrix from planc.conf, and the per-job cap;
//   MODE          requeue when the job is requeueable, else cancel;
//                 guaranteed tiers OFF (never preempted);
//   PRIO          the victim order (a job already in grace first, then P3,
//                 fewest recent preemptions, shortest current run);
//   GRACE_TIME    asked exactly once when a preemption starts: the tier's
//                 grace; the preemption is counted, the owner's note
//                 written and the batch script sent SIGTERM.
// planc_preempt_run_end_v1 is called by jobcomp/planc when any run ends: a
// victim that ends during its grace is what the policy says it is.
// A worker thread (plugins/preempt_worker.cc) carries out what the tracker
// asks for (end graces on time, call preemptions off, kill, requeue,
// release robbed preemptors) and saves the state file.  This file holds the
// entry points and the one plugin-state object (plugins/preempt_state.h).
#include "plugins/preempt_state.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <string>

#include "common/infusion.h"
#include "common/preempt_policy.h"
#include "plugins/planc_shared.h"
#include "plugins/worker_thread.h"

PLANC_EXPORT const char plugin_name[] = "Plan C tiered preemption";
PLANC_EXPORT const char plugin_type[] = "preempt/planc";
PLANC_EXPORT const uint32_t plugin_version = SLURM_VERSION_NUMBER;

namespace {

using planc::Tier;
using planc::TierId;
using planc::preempt::Plugin;
using planc::preempt::Policy;
using planc::preempt::policy;

constexpr const char* kStateFile = "planc_preempt_state";

Plugin* g = nullptr;

// The P3 preemption budget (common/preempt_budget.h) for running
// P3-counted `candidate` of `preemptor`.  Slurm asks preemptable() about
// one preemptor's candidates in a row: the budget is worked out when the
// preemptor changes (or the second does, or a preemption was counted).
// A P2 preemptor is offered none once it is spent; otherwise, when it
// needs whole nodes or GPUs on a node, every one (which of them may go is
// answered at PREEMPT_DATA_MODE, p3_budget_refuses()), else the first that
// many.  A guaranteed preemptor is never refused (the SLA's start),
// whatever its candidate's tier, but the budget is worked out for it all
// the same: once the soft share is spent its victim order takes P3
// candidates after P2 ones and the fewest P3 runs first (p3_first).
// Under slurmctld's job lock.
bool within_p3_budget(job_record_t* preemptor, bool preemptor_spot, uint32_t candidate,
                      time_t now) {
  if (preemptor->job_id != g->budget_preemptor || now != g->budget_at) {
    std::optional<uint32_t> left;
    {
      planc::MutexLock l(g->mu);
      left = planc::preempt::refresh_budget(*g, now);
    }
    g->budget_preemptor = preemptor->job_id;
    g->budget_at = now;
    g->budget_left = left ? *left : UINT32_MAX;
    // Whether the budget is spent or not (it may be spent in the next
    // second of the same pass: then every candidate offered is refused).
    g->budget_by_node = preemptor_spot && left &&
                        (planc::slurm::needs_whole_nodes(preemptor) ||
                         planc::slurm::gpus_per_node_asked(preemptor));
    g->budget_nodes = planc::slurm::nodes_asked(preemptor);
  }
  if (!preemptor_spot) return true;
  if (!g->budget_left) return false;
  if (g->budget_left == UINT32_MAX) return true;
  if (g->budget_by_node) {
    // The candidates of this round only (the round of the victim rank,
    // which this candidate opens when it is the first).
    planc::MutexLock l(g->crowding_mu);
    if (!g->crowding.collecting_for(preemptor->job_id)) g->budget_offered.clear();
    g->budget_offered.insert(candidate);
    return true;
  }
  g->budget_left--;
  return true;
}

// Whole nodes: the candidates on the most crowded of `job`'s nodes
// (`key`: the largest of its nodes' keys in the victim order).
uint32_t most_crowded(job_record_t* job, bool key = false) REQUIRES(g->crowding_mu) {
  uint32_t most = 0;
  // The analysis does not see crowding_mu held around the callback.
  planc::slurm::for_each_node(job, [&most, key](uint32_t n) NO_THREAD_SAFETY_ANALYSIS {
    most = std::max(most, key ? g->crowding.crowd(n) : g->crowding.on_node(n));
  });
  return most;
}

// Whether the P3 budget keeps running `job` from going for the P2
// preemptor being looked at: it was offered under the limit
// (within_p3_budget), is not in its grace yet, and the node it would free
// needs more runs to go than the budget has left.  Slurm (select/cons_tres)
// asks each candidate's mode before it takes it away, in the victim order,
// and again for the ones it preempts: the answer stays the same until the
// next preemptor, the next second or a counted preemption (after which
// every answer is yes: the rest of that preemptor's victims were already
// chosen).  A candidate in no set of runs that frees a node for the
// preemptor is refused too.  Under slurmctld's job lock (read or write).
bool p3_budget_refuses(job_record_t* job) REQUIRES(g->crowding_mu) {
  if (!g->budget_by_node || !g->budget_preemptor || job->preempt_time ||
      g->last_preemptor != g->budget_preemptor || g->crowding.preemptor() != g->budget_preemptor ||
      !g->budget_offered.count(job->job_id))
    return false;
  const std::optional<uint32_t> runs =
      g->crowding.whole_nodes() ? most_crowded(job) : g->crowding.runs_to_free(job->job_id);
  return !runs || !planc::p3_budget_covers(*runs, g->budget_nodes, g->budget_left);
}

// What the victim order knows of running `job` at `now`, but for its
// nodes: its tier's class (P3 demoted below P2 for a guaranteed preemptor
// once the P3 budget's soft share is reached), its preemptions in the
// window, its run.  Under slurmctld's job lock.
planc::VictimFacts victim_facts(job_record_t* job, time_t now) {
  const Policy& pol = policy(*g);
  const Tier* t = planc::slurm::job_tier(pol.tiers, job);
  uint8_t victim_class = t ? t->victim_class : uint8_t{3};
  if (t && pol.config->p3_preempt_max_percent &&
      !pol.config->tiers.tier(g->last_preemptor_tier).preemptible &&
      g->p3_soft_reached.load(std::memory_order_relaxed))
    victim_class = planc::victim_class_now(victim_class,
                                           planc::slurm::counted_tier_of(job, t->id) == TierId::kP3,
                                           true, pol.config->tiers.tier(TierId::kP2).victim_class);
  planc::VictimFacts v{victim_class, 0, planc::run_minutes(job->start_time, now)};
  if (g->in_ledger.maybe_contains(job->job_id)) {
    planc::MutexLock l(g->mu);
    v.recent_preemptions = g->tracker.ledger().count_in_window(job->job_id, now);
  }
  return v;
}

// A running candidate Slurm is offered for `preemptor` (`p3`: it counts
// as P3): counted on its nodes when the preemptor needs whole nodes or
// GPUs on a node (common/preempt_policy.h NodeCrowding).  Slurm offers one preemptor's
// candidates in one pass over its job list, then sorts them (get_data
// PREEMPT_DATA_PRIO) and its select plugin asks each one's mode
// (PREEMPT_DATA_MODE): either closes the round.  The round's first
// candidate offered again also starts a new one.  Pending jobs are
// skipped at once: the job queue's sort asks preemptable() about pairs of
// pending jobs.  (A candidate Slurm takes
// without asking preemptable(), one on time borrowed from a reservation,
// is ranked with the counts of the last preemptor that was asked.)
// Under slurmctld's job write lock.
void note_candidate(job_record_t* preemptor, job_record_t* preemptee, bool p3) {
  if (!IS_JOB_RUNNING(preemptee)) return;
  planc::MutexLock l(g->crowding_mu);
  const Policy& pol = policy(*g);
  auto ask = [preemptor, &pol] {
    planc::NodeCrowding::Ask a;
    a.whole_nodes = planc::slurm::needs_whole_nodes(preemptor);
    a.spare_p3 = a.whole_nodes && pol.config->whole_node_spare_p3;
    // Past the budget's soft share a guaranteed preemptor's P3 victims
    // pass the hour's target: the fewest of them first, on every node.
    a.p3_first = pol.config->p3_preempt_max_percent &&
                 !pol.config->tiers.tier(g->last_preemptor_tier).preemptible &&
                 g->p3_soft_reached.load(std::memory_order_relaxed);
    if (!a.whole_nodes)
      a.gpus = static_cast<uint32_t>(
          std::min<uint64_t>(planc::slurm::gpus_per_node_asked(preemptor), UINT32_MAX));
    if (a.gpus) a.gpu_type = planc::slurm::gpu_type_asked(preemptor);
    return a;
  };
  if (!g->crowding.offer(preemptor->job_id, preemptee->job_id, ask, planc::slurm::node_count()))
    return;
  if (g->crowding.whole_nodes()) {
    planc::slurm::for_each_node(
        preemptee, [p3](uint32_t n) NO_THREAD_SAFETY_ANALYSIS { g->crowding.add(n, p3); });
    return;
  }
  const bool in_grace = preemptee->preempt_time != 0;
  const uint32_t order =
      in_grace ? planc::kInGraceRank : planc::victim_rank(victim_facts(preemptee, time(nullptr)));
  const std::string& type = g->crowding.ask().gpu_type;
  planc::slurm::for_each_node_gpus(
      preemptee, type, [&](uint32_t n, uint64_t gpus) NO_THREAD_SAFETY_ANALYSIS {
        auto free = planc::slurm::node_gpus_for(preemptor, type, n);
        g->crowding.add(n, preemptee->job_id,
                        static_cast<uint32_t>(std::min<uint64_t>(gpus, 0xffff)),
                        free ? std::optional<planc::NodeCrowding::NodeGpus>(
                                   {static_cast<uint32_t>(std::min<uint64_t>(free->total, 0xffff)),
                                    static_cast<uint32_t>(std::min<uint64_t>(free->free, 0xffff))})
                             : std::nullopt,
                        in_grace, order, p3);
      });
}

}  // namespace

PLANC_EXPORT int init(void) {
  try {
    auto config = planc::slurm::load_plugin_config(plugin_type);
    if (!config) return SLURM_ERROR;
    std::string path = planc::slurm::state_file_path(kStateFile);
    // A backup controller stands by: the state file is the primary's until
    // this slurmctld takes control (planc_preempt_control_v1).
    const bool backup = planc::slurm::started_as_backup();
    std::string budget_path = planc::slurm::state_file_path(planc::preempt::kBudgetFile);
    planc::PreemptBudget budget = backup ? planc::preempt::fresh_budget(*config)
                                         : planc::preempt::load_budget(*config, budget_path);
    g = new Plugin(
        config, path,
        backup ? planc::preempt::fresh_tracker(*config) : planc::preempt::load_state(*config, path),
        std::move(budget_path), std::move(budget));
    {
      planc::MutexLock l(g->mu);
      g->standby = backup;
      g->in_ledger.rebuild(g->tracker.ledger().job_ids());
    }
    if (backup)
      info("%s: a backup controller: on standby until this slurmctld takes control", plugin_type);
    g->worker = planc::start_worker("planc_preempt", planc::preempt::run_worker, g);
    verbose("%s loaded", plugin_type);
    return SLURM_SUCCESS;
  } catch (const std::exception& e) {
    error("%s: init failed: %s", plugin_type, e.what());
    return SLURM_ERROR;
  }
}

// Slurm calls fini() on shutdown, and with all its write locks held when
// PreemptType changes on reconfigure (read_config.c); the worker may be
// waiting for those locks, so change PreemptType only by a restart.
PLANC_EXPORT void fini(void) {
  if (!g) return;
  try {
    {
      planc::MutexLock l(g->mu);
      g->stop = true;
    }
    g->cv.notify_all();
    planc::join_worker(g->worker);
    // Saves the state unless on standby (the files are then the controller's
    // in control, or were saved when this one gave control up).
    planc::preempt::give_up_control(*g);
  } catch (const std::exception& e) {
    error("%s: fini: %s", plugin_type, e.what());
  }
  delete g;
  g = nullptr;
}

PLANC_EXPORT bool preempt_p_preemptable(job_record_t* preemptee, job_record_t* preemptor) {
  try {
    const Policy& pol = policy(*g);
    const Tier* ee = planc::slurm::job_tier(pol.tiers, preemptee);
    const Tier* er = planc::slurm::job_tier(pol.tiers, preemptor);
    if (!ee || !er) return false;
    // A free attempt (a starved job lent a higher tier) preempts nothing:
    // its victims would starve in turn (common/starvation.h).
    if (planc::slurm::on_free_attempt(preemptor)) return false;
    // Nor does an infused replica: capacity infusion grows pools into GPUs
    // nobody uses (common/infusion.h), never into running work.
    if (planc::slurm::infused_mark_of(preemptor)) return false;
    if (!pol.config->tiers.can_preempt(er->id, ee->id) &&
        !(ee->id == TierId::kP1 &&
          planc::reclaims_replica(er->id, planc::slurm::infused_mark_of(preemptor).has_value(),
                                  ee->id, planc::slurm::infused_mark_of(preemptee).has_value())))
      return false;
    // Capacity infusion is giving replicas back for this guaranteed job:
    // their GPUs are being freed for it, nothing else is preempted for it
    // meanwhile (not a job on another node, nor another replica, while the
    // drained replica's node completes).  Nor does a replica preempt
    // anything then: the GPUs are for the guaranteed job.
    if (!er->preemptible)
      if (auto reclaiming = g->reclaiming_for.load(std::memory_order_relaxed)) {
        const bool replica = planc::slurm::infused_mark_of(preemptor).has_value();
        if (reclaiming(replica ? 0 : preemptor->job_id)) return false;
      }
    g->last_preemptor = preemptor->job_id;
    g->last_preemptor_tier = er->id;
    const time_t now = time(nullptr);
    // A preemptor whose own victims are still in their grace is offered
    // those victims only, whatever their count (each was counted when its
    // preemption started), until their graces end (docs/design.md, "A
    // preemptor keeps the nodes it is clearing").  Slurm's backfill plans
    // a preemptor by removing every candidate at once and placing it as if
    // their resources were free (select/cons_tres's will-run test), then
    // holds the nodes it placed it on, not those its preemption is
    // clearing; so the GPUs its no-grace victims had freed went to other
    // jobs while its graced victims checkpointed, and it preempted again
    // elsewhere.  With its own victims only, the nodes it is placed on are
    // the ones being cleared, and backfill holds them for it.
    // Whether it counts as P3 (free attempts do): for the budget and the
    // victim order.  Only a running candidate is counted at all.
    const bool p3 = IS_JOB_RUNNING(preemptee) &&
                    planc::slurm::counted_tier_of(preemptee, ee->id) == TierId::kP3;
    if (planc::slurm::preemption_started_for(preemptor)) {
      std::optional<bool> own;
      {
        planc::MutexLock l(g->mu);
        own = g->tracker.own_victim_in_grace(preemptor->job_id, preemptee->job_id);
      }
      if (own) {
        if (!*own) return false;
        note_candidate(preemptor, preemptee, p3);
        return true;
      }
    }
    if (g->in_ledger.maybe_contains(preemptee->job_id)) {
      planc::MutexLock l(g->mu);
      if (g->tracker.capped(preemptee->job_id, now)) return false;
    }
    // Slurm asks about every job of its list, pending and finished ones
    // too (src/slurmctld/preempt.c _add_preemptable_job tests the running
    // overlap after asking): only a running one may spend the budget, or
    // each finished P3 job still in the list (MinJobAge) would take a
    // share of it and P2 jobs would hardly ever get one.
    // A guaranteed preemptor is never refused, but its round's victim
    // order reads the budget (p3_first): worked out at its first
    // candidate, whatever that one's tier.
    if (pol.config->p3_preempt_max_percent && IS_JOB_RUNNING(preemptee) &&
        (!er->preemptible || p3) &&
        !within_p3_budget(preemptor, er->preemptible, preemptee->job_id, now))
      return false;
    note_candidate(preemptor, preemptee, p3);
    return true;
  } catch (...) {
    return false;  // when in doubt, preempt nothing
  }
}

PLANC_EXPORT bool preempt_p_job_preempt_check(job_queue_rec_t* preemptor,
                                              job_queue_rec_t* preemptee) {
  return preempt_p_preemptable(preemptee->job_ptr, preemptor->job_ptr);
}

PLANC_EXPORT int preempt_p_get_data(job_record_t* job_ptr, slurm_preempt_data_type_t data_type,
                                    void* data) {
  try {
    switch (data_type) {
      case PREEMPT_DATA_ENABLED:
        *static_cast<bool*>(data) = slurm_conf.preempt_mode != PREEMPT_MODE_OFF;
        return SLURM_SUCCESS;
      case PREEMPT_DATA_MODE: {
        planc::MutexLock l(g->crowding_mu);
        g->crowding.close();
        const Tier* t = planc::slurm::job_tier(policy(*g).tiers, job_ptr);
        uint16_t mode = PREEMPT_MODE_OFF;
        if (t && t->preemptible && !p3_budget_refuses(job_ptr))
          mode = planc::slurm::requeues(job_ptr) ? PREEMPT_MODE_REQUEUE : PREEMPT_MODE_CANCEL;
        else if (t && t->id == TierId::kP1 && planc::slurm::infused_mark_of(job_ptr))
          mode = PREEMPT_MODE_CANCEL;  // a reclaimed replica: the pool grows again when idle
        *static_cast<uint16_t*>(data) = mode;
        return SLURM_SUCCESS;
      }
      case PREEMPT_DATA_PRIO: {
        planc::MutexLock l(g->crowding_mu);
        g->crowding.close();
        // A job already in its grace period comes first, so Slurm waits for
        // it instead of preempting yet another job for the same preemptor.
        if (job_ptr->preempt_time) {
          *static_cast<uint32_t*>(data) = planc::kInGraceRank;
          return SLURM_SUCCESS;
        }
        planc::VictimFacts v = victim_facts(job_ptr, time(nullptr));
        if (g->crowding.whole_nodes())
          v.node_victims = most_crowded(job_ptr, true);
        else if (g->crowding.gpus_on_a_node())
          v.node_victims = g->crowding.fewest_victims(job_ptr->job_id);
        *static_cast<uint32_t*>(data) = planc::victim_rank(v);
        return SLURM_SUCCESS;
      }
      case PREEMPT_DATA_GRACE_TIME:
        *static_cast<uint32_t*>(data) = planc::preempt::start_preemption(*g, job_ptr);
        return SLURM_SUCCESS;
    }
    error("%s: unknown preempt data type %d", plugin_type, static_cast<int>(data_type));
    return SLURM_ERROR;
  } catch (const std::exception& e) {
    error("%s: get_data: %s", plugin_type, e.what());
    return SLURM_ERROR;
  }
}

// See plugins/planc_shared.h.  Called for every run that ends (job write
// lock held): only runs whose preemption was in progress get past the
// first test.
PLANC_EXPORT int planc_preempt_run_end_v1(void* record) {
  auto* job = static_cast<job_record_t*>(record);
  if (!g || !job || !job->preempt_time) return 0;
  try {
    return planc::preempt::run_ended(*g, job);
  } catch (const std::exception& e) {
    error("%s: run end of %pJ: %s", plugin_type, job, e.what());
    return 0;
  }
}

// See plugins/planc_shared.h: slurmctld/planc's init() and fini().
PLANC_EXPORT void planc_preempt_control_v1(int in_control) {
  if (!g) return;
  try {
    if (in_control)
      planc::preempt::take_control(*g);
    else
      planc::preempt::give_up_control(*g);
  } catch (const std::exception& e) {
    error("%s: %s control: %s", plugin_type, in_control ? "taking" : "giving up", e.what());
  }
}
