// The preemptable check alone, in-process: ns per call of what
// preempt/planc does in preempt_p_preemptable() beside what stock
// preempt/qos does, on the same sequence of (preemptee, preemptor) pairs.
//
//   qos    compare the two QoS ids, test the preemptee's id in the
//          preemptor's preempt bitmap (src/plugins/preempt/qos/preempt_qos.c)
//   planc  the tier of both jobs from a QosTierCache (by QoS id), can_preempt(),
//          and when the tiers allow it and the LedgerFilter says the
//          preemptee may have a history, time() and PreemptLedger::capped()
//          under a std::mutex (plugins/preempt_planc.cc)
//
// and the victim rank (PREEMPT_DATA_PRIO, asked twice per comparison while
// Slurm sorts the candidates): preempt/qos's _gen_job_prio() (QoS priority
// and node count) against preempt/planc's (tier, the filter, and the
// ledger's count only for jobs that may have one, run minutes).
//
// Both run through a non-inlined function taking the fake job records by
// pointer, as slurmctld calls the plugin through a function pointer.  Two
// pair mixes: "mixed" draws both QoS from all four tiers (most pairs are
// refused by the tier matrix before the ledger), "P0>P3" always reaches
// the ledger.  The ledger holds --jobs jobs (default 1,000) with 1-3
// preemptions each; preemptee ids are drawn from twice that range, so
// about half the lookups find a history.
//
//   test/bench/preempt_check_bench [calls] [ledger_jobs]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/preempt_policy.h"
#include "common/tier.h"

namespace {

// What the two plugins read of a job: a QoS record (id, name, the preempt
// bitmap as Slurm's bitstr_t keeps it: 64-bit words) and the job id.
struct FakeQos {
  uint32_t id;
  std::string name;
  std::vector<uint64_t> preempt_bits;  // empty: Preempt= not set
};
struct FakeJob {
  uint32_t job_id;
  const FakeQos* qos;
  uint32_t qos_priority = 0;  // preempt/qos reads qos_ptr->priority
  uint32_t node_cnt = 1;
  time_t start_time = 0;
  time_t preempt_time = 0;
};

// preempt/qos, preempt_p_preemptable(), without PREEMPT_MODE_WITHIN (off in
// both test clusters).
__attribute__((noinline)) bool qos_preemptable(const FakeJob* ee, const FakeJob* er) {
  const FakeQos* qos_ee = ee->qos;
  const FakeQos* qos_or = er->qos;
  if (!qos_ee || !qos_or) return false;
  if (qos_or->id == qos_ee->id) return false;
  if (qos_or->preempt_bits.empty()) return false;
  return (qos_or->preempt_bits[qos_ee->id / 64] >> (qos_ee->id % 64)) & 1;
}

// preempt/planc, preempt_p_preemptable(), with the same globals the plugin
// keeps (config, ledger and its mutex, the last preemptor).
struct PlancState {
  const planc::PlancConfig* cfg;
  const planc::QosTierCache* tiers;
  std::mutex mu;
  planc::PreemptLedger* ledger;  // GUARDED_BY(mu)
  const planc::LedgerFilter* filter;
  uint32_t last_preemptor = 0;
  planc::TierId last_preemptor_tier = planc::TierId::kP0;
};

__attribute__((noinline)) bool planc_preemptable(PlancState* s, const FakeJob* ee,
                                                 const FakeJob* er) {
  const planc::PlancConfig& cfg = *s->cfg;
  const planc::Tier* tee = ee->qos ? s->tiers->lookup(ee->qos->id, ee->qos->name.c_str()) : nullptr;
  const planc::Tier* ter = er->qos ? s->tiers->lookup(er->qos->id, er->qos->name.c_str()) : nullptr;
  if (!tee || !ter || !cfg.tiers.can_preempt(ter->id, tee->id)) return false;
  s->last_preemptor = er->job_id;
  s->last_preemptor_tier = ter->id;
  if (!s->filter->maybe_contains(ee->job_id)) return true;
  std::lock_guard<std::mutex> l(s->mu);
  return !s->ledger->capped(ee->job_id, time(nullptr));
}

// The first half of planc_preemptable() alone: the tier lookups and the
// matrix, to show how the cost splits between them and the ledger.
__attribute__((noinline)) bool planc_tiers_only(PlancState* s, const FakeJob* ee,
                                                const FakeJob* er) {
  const planc::PlancConfig& cfg = *s->cfg;
  const planc::Tier* tee = ee->qos ? s->tiers->lookup(ee->qos->id, ee->qos->name.c_str()) : nullptr;
  const planc::Tier* ter = er->qos ? s->tiers->lookup(er->qos->id, er->qos->name.c_str()) : nullptr;
  return tee && ter && cfg.tiers.can_preempt(ter->id, tee->id);
}

// preempt/qos, _gen_job_prio().
__attribute__((noinline)) uint32_t qos_prio(const FakeJob* j) {
  uint32_t prio = j->qos ? (j->qos_priority >= 0xffff ? 0xffffu << 16 : j->qos_priority << 16) : 0;
  return prio + (j->node_cnt >= 0xffff ? 0xffff : j->node_cnt);
}

// preempt/planc, preempt_p_get_data(PREEMPT_DATA_PRIO).
__attribute__((noinline)) uint32_t planc_prio(PlancState* s, const FakeJob* j) {
  if (j->preempt_time) return planc::kInGraceRank;
  const planc::Tier* t = j->qos ? s->tiers->lookup(j->qos->id, j->qos->name.c_str()) : nullptr;
  time_t now = time(nullptr);
  planc::VictimFacts v{t ? t->victim_class : uint8_t{3}, 0, 0};
  v.run_minutes = planc::run_minutes(j->start_time, now);
  if (s->filter->maybe_contains(j->job_id)) {
    std::lock_guard<std::mutex> l(s->mu);
    v.recent_preemptions = s->ledger->count_in_window(j->job_id, now);
  }
  return planc::victim_rank(v);
}

volatile uint64_t g_sink;

template <class F>
double ns_per_call(long n, F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  uint64_t hits = 0;
  for (long i = 0; i < n; ++i) hits += f(i);
  auto t1 = std::chrono::steady_clock::now();
  g_sink = g_sink + hits;
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(n);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  long n = argc > 1 ? std::atol(argv[1]) : 2000000;
  uint32_t ledger_jobs = argc > 2 ? static_cast<uint32_t>(std::atol(argv[2])) : 1000;
  if (n <= 0 || ledger_jobs == 0) {
    std::fprintf(stderr, "usage: preempt_check_bench [calls] [ledger_jobs]\n");
    return 2;
  }

  planc::PlancConfig cfg = planc::parse_config("", "bench").value();

  // The QoS as slurmdbd has them in the test cluster: ids in creation order
  // (1 is "normal"), Preempt= lists as planc-conf generates them.
  std::vector<FakeQos> qos;
  uint32_t next_id = 2;
  for (const planc::Tier& t : cfg.tiers.all()) qos.push_back({next_id++, t.qos, {}});
  for (size_t i = 0; i < qos.size(); ++i) {
    const planc::Tier& t = cfg.tiers.all()[i];
    for (size_t j = 0; j < qos.size(); ++j) {
      if (!t.preempts[j]) continue;
      uint32_t id = qos[j].id;
      if (qos[i].preempt_bits.size() <= id / 64) qos[i].preempt_bits.resize(id / 64 + 1);
      qos[i].preempt_bits[id / 64] |= uint64_t{1} << (id % 64);
    }
  }
  const FakeQos* p0 = &qos[planc::tier_index(planc::TierId::kP0)];
  const FakeQos* p3 = &qos[planc::tier_index(planc::TierId::kP3)];

  // The ledger: jobs 1..ledger_jobs, 1-3 preemptions each within the window.
  time_t now = time(nullptr);
  planc::PreemptLedger ledger(cfg.preempt_max_count, cfg.preempt_window_seconds);
  std::mt19937 rng(42);
  for (uint32_t id = 1; id <= ledger_jobs; ++id) {
    uint32_t k = 1 + rng() % 3;
    for (uint32_t j = 0; j < k; ++j)
      ledger.record(id, now - 60 - static_cast<time_t>(rng() % 3600));
  }

  // Job pairs, 4096 of each mix, cycled through by both plugins.
  constexpr size_t kPairs = 4096;
  std::vector<FakeJob> mixed_ee(kPairs), mixed_er(kPairs), hot_ee(kPairs), hot_er(kPairs);
  for (size_t i = 0; i < kPairs; ++i) {
    uint32_t id_ee = 1 + rng() % (2 * ledger_jobs);
    uint32_t id_er = 2 * ledger_jobs + 1 + rng() % 1000;
    mixed_ee[i] = {id_ee, &qos[rng() % qos.size()]};
    mixed_er[i] = {id_er, &qos[rng() % qos.size()]};
    hot_ee[i] = {id_ee, p3};
    hot_er[i] = {id_er, p0};
  }

  PlancState st;
  st.cfg = &cfg;
  planc::QosTierCache tier_cache(cfg.tiers);
  st.tiers = &tier_cache;
  st.ledger = &ledger;
  auto filter = std::make_unique<planc::LedgerFilter>();
  filter->rebuild(ledger.job_ids());
  st.filter = filter.get();

  struct Mix {
    const char* name;
    const std::vector<FakeJob>* ee;
    const std::vector<FakeJob>* er;
  };
  const Mix mixes[] = {{"mixed", &mixed_ee, &mixed_er}, {"P0>P3", &hot_ee, &hot_er}};
  constexpr int kRounds = 5;
  for (const Mix& m : mixes) {
    const FakeJob* ee = m.ee->data();
    const FakeJob* er = m.er->data();
    std::vector<double> q, p, t;
    // Alternate the two in the same process; the first round warms up.
    for (int round = 0; round <= kRounds; ++round) {
      double qn = ns_per_call(
          n, [&](long i) { return qos_preemptable(&ee[i & (kPairs - 1)], &er[i & (kPairs - 1)]); });
      double pn = ns_per_call(n, [&](long i) {
        return planc_preemptable(&st, &ee[i & (kPairs - 1)], &er[i & (kPairs - 1)]);
      });
      double tn = ns_per_call(n, [&](long i) {
        return planc_tiers_only(&st, &ee[i & (kPairs - 1)], &er[i & (kPairs - 1)]);
      });
      if (round == 0) continue;
      q.push_back(qn);
      p.push_back(pn);
      t.push_back(tn);
    }
    double qm = median(q), pm = median(p), tm = median(t);
    std::printf(
        "preemptable check %-6s: planc %6.1f ns/call, qos %5.1f ns/call, ratio %5.1fx "
        "(tier lookups+matrix alone %5.1f ns; median of %d x %ld calls; ledger %zu jobs)\n",
        m.name, pm, qm, pm / qm, tm, kRounds, n, ledger.size());
  }

  // The victim rank over running P3 candidates, as Slurm sorts them: a
  // quarter of them with a counted preemption (they were requeued and run
  // again), the rest never preempted.
  std::vector<FakeJob> cand(kPairs);
  for (size_t i = 0; i < kPairs; ++i) {
    bool has_history = rng() % 4 == 0;
    uint32_t id =
        has_history ? 1 + rng() % ledger_jobs : 10 * ledger_jobs + static_cast<uint32_t>(i);
    cand[i] = {id, p3, 1000, 1, now - 30 - static_cast<time_t>(rng() % 7200), 0};
  }
  std::vector<double> q, p;
  for (int round = 0; round <= kRounds; ++round) {
    double qn = ns_per_call(n, [&](long i) { return qos_prio(&cand[i & (kPairs - 1)]) & 1; });
    double pn =
        ns_per_call(n, [&](long i) { return planc_prio(&st, &cand[i & (kPairs - 1)]) & 1; });
    if (round == 0) continue;
    q.push_back(qn);
    p.push_back(pn);
  }
  double qm = median(q), pm = median(p);
  std::printf(
      "victim rank (PRIO)      : planc %6.1f ns/call, qos %5.1f ns/call, ratio %5.1fx "
      "(1 in 4 candidates with a counted preemption; median of %d x %ld calls)\n",
      pm, qm, pm / qm, kRounds, n);
  return 0;
}
