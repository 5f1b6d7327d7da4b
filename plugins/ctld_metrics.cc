// slurmctld/planc's metrics snapshot (plugins/ctld_state.h): what
// planc-exporter reads (common/metrics_snapshot.h) from
// StateSaveLocation/planc_metrics_slurmctld, written by the worker outside
// every lock after each sample: the pool's GPUs and jobs per tier,
// idle-threshold crossings, the SLA, starvation, spot-cap refusals, the
// market's floors, infusion's operations and replicas, and reloads.
#include "plugins/ctld_state.h"

#include <chrono>

#include "common/state_file.h"

namespace planc::ctld {

void write_metrics(Controller& c, const planc::PoolUsage& pool, const planc::ConfigWatch& watch) {
  const auto t0 = std::chrono::steady_clock::now();
  planc::MetricsSnapshot s;
  s.source = "slurmctld";
  s.written = time(nullptr);
  planc::add_pool_samples(pool, c.idle.crossings(), &s);
  c.sla.add_samples(&s);
  s.samples.push_back(
      {"planc_starvation_upgrades_total", {}, static_cast<double>(c.stats.upgrades.load())});
  s.samples.push_back(
      {"planc_starvation_reverts_total", {}, static_cast<double>(c.stats.reverts.load())});
  for (int t = 0; t < planc::kTierCount; t++)
    s.samples.push_back({"planc_spot_cap_refusals_total",
                         {{"tier", "P" + std::to_string(t)}},
                         static_cast<double>(c.stats.spot_refusals[t].load())});
  if (auto f = market_floors(c)) {
    auto price = [](planc::Micros m) { return static_cast<double>(m) / planc::kMicrosPerUnit; };
    s.samples.push_back(
        {"planc_market_floor_price", {{"gpu_type", "default"}}, price(f->default_floor)});
    for (const auto& [type, floor] : f->by_type)
      s.samples.push_back({"planc_market_floor_price", {{"gpu_type", type}}, price(floor)});
    if (f->vacancy) s.samples.push_back({"planc_market_vacancy_ratio", {}, *f->vacancy / 1000.0});
    s.samples.push_back(
        {"planc_market_next_round_timestamp_seconds", {}, static_cast<double>(f->next_round)});
  }
  {
    planc::MutexLock l(c.infusion_mu);
    for (const auto& [key, n] : c.infusion_ops)
      s.samples.push_back({"planc_infusion_operations_total",
                           {{"pool", key.first}, {"action", key.second}},
                           static_cast<double>(n)});
    for (const auto& [name, n] : c.infusion_replicas)
      s.samples.push_back({"planc_infusion_replicas", {{"pool", name}}, static_cast<double>(n)});
  }
  s.samples.push_back(
      {"planc_config_reloads_total", {{"result", "ok"}}, static_cast<double>(watch.reloaded())});
  s.samples.push_back(
      {"planc_config_reloads_total", {{"result", "failed"}}, static_cast<double>(watch.refused())});
  if (auto err = planc::write_file_atomically(c.metrics_path, planc::serialize_snapshot(s),
                                              planc::Durability::kNoSync))
    error("%s: metrics snapshot: %s", plugin_type, err->c_str());
  c.stats.metrics_write_usec +=
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count();
}

}  // namespace planc::ctld
