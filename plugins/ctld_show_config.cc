// slurmctld/planc's part of `scontrol show config` (plugins/ctld_state.h):
// slurmctld_plugstack_p_get_config's key/value pairs, from the
// configuration in force, the market's floors, infusion as shown, and the
// statistics (CtldStats).  Called in an RPC thread.
#include "plugins/ctld_state.h"

#include "common/preempt_policy.h"  // format_utc

namespace planc::ctld {
namespace {

using planc::TierId;

void add_pair(List pairs, const char* name, const std::string& value) {
  auto* kp = static_cast<config_key_pair_t*>(xmalloc(sizeof(config_key_pair_t)));
  kp->name = xstrdup(name);
  kp->value = xstrdup(value.c_str());
  list_append(pairs, kp);
}

}  // namespace

void show_config(Controller& c, config_plugin_params_t* p) {
  std::shared_ptr<const planc::PlancConfig> shown;
  {
    planc::MutexLock l(c.shown_mu);
    shown = c.shown;
  }
  if (!shown) return;
  const planc::PlancConfig& cfg = *shown;
  xstrcat(p->name, plugin_type);
  auto secs = [](uint64_t s) { return std::to_string(s) + " s"; };
  add_pair(p->key_pairs, "P3PreemptMaxPercent",
           cfg.p3_preempt_max_percent
               ? std::to_string(cfg.p3_preempt_max_percent) + "% of the P3 runs running, per " +
                     secs(cfg.p3_preempt_window_seconds)
               : "0 (no budget)");
  if (cfg.p3_preempt_max_percent)
    add_pair(p->key_pairs, "P3PreemptSoftPercent",
             std::to_string(cfg.p3_soft_percent()) +
                 "% (from there guaranteed jobs take P2 victims first)");
  const int64_t p3_running = c.p3_running.load();
  add_pair(p->key_pairs, "P3PreemptRunning",
           p3_running < 0 ? "not sampled yet" : std::to_string(p3_running));
  add_pair(p->key_pairs, "StarvationThreshold", secs(cfg.starvation_threshold_seconds));
  add_pair(p->key_pairs, "StarvationInterval", secs(cfg.starvation_interval_seconds));
  add_pair(p->key_pairs, "StarvationMaxPerInterval",
           std::to_string(cfg.starvation_max_per_interval));
  add_pair(p->key_pairs, "StarvationMaxPercent",
           std::to_string(cfg.starvation_max_share_percent) + "% of the GPUs");
  add_pair(p->key_pairs, "SpotCapP2", planc::describe_spot_cap(cfg, TierId::kP2));
  add_pair(p->key_pairs, "SpotCapP3", planc::describe_spot_cap(cfg, TierId::kP3));
  add_pair(p->key_pairs, "SpotCapResetTime", planc::format_time_of_day(cfg.spot_reset_seconds));
  add_pair(p->key_pairs, "SpotCapTimeZone",
           "UTC" + planc::format_utc_offset(cfg.spot_utc_offset_seconds));
  add_pair(p->key_pairs, "SpotCapDayLength", secs(cfg.spot_day_seconds));
  add_pair(p->key_pairs, "Market", cfg.market.enabled ? "yes" : "no");
  if (cfg.market.enabled) {
    add_pair(p->key_pairs, "MarketInterval", secs(cfg.market.interval_seconds));
    add_pair(p->key_pairs, "MarketMinFraction", planc::permille_text(cfg.market.min_permille));
    add_pair(p->key_pairs, "MarketFloorCurve", planc::format_floor_curve(cfg.market.floor_curve));
    if (auto f = market_floors(c)) {
      std::string floors = "default=" + planc::format_micros(f->default_floor);
      for (const auto& [type, floor] : f->by_type)
        floors += "," + type + "=" + planc::format_micros(floor);
      add_pair(p->key_pairs, "MarketFloor", floors + " " + cfg.prices.currency + "/card-hour");
      std::string lists = "default=" + planc::format_micros(cfg.prices.default_card_hour);
      for (const auto& [type, list] : cfg.prices.card_hour)
        lists += "," + type + "=" + planc::format_micros(list);
      add_pair(p->key_pairs, "MarketListPrice", lists + " " + cfg.prices.currency + "/card-hour");
      add_pair(p->key_pairs, "MarketVacancy",
               f->vacancy ? planc::permille_text(*f->vacancy) : "unknown");
      add_pair(p->key_pairs, "MarketLastRound", f->at ? planc::format_utc(f->at) : "none yet");
      add_pair(p->key_pairs, "MarketNextRound", planc::format_utc(f->next_round));
      {
        planc::MutexLock l(c.floors_mu);
        add_pair(p->key_pairs, "MarketLastClearing", c.last_clearing);
      }
      add_pair(p->key_pairs, "MarketRounds", std::to_string(c.stats.market_rounds.load()));
      add_pair(p->key_pairs, "MarketMatched", std::to_string(c.stats.market_matched.load()));
      add_pair(p->key_pairs, "MarketJobUpdates", std::to_string(c.stats.market_updates.load()));
      add_pair(p->key_pairs, "MarketRoundBids", std::to_string(c.stats.round_bids.load()));
      add_pair(p->key_pairs, "MarketRoundReadUsec", std::to_string(c.stats.round_read_usec.load()));
      add_pair(p->key_pairs, "MarketRoundPrepareUsec",
               std::to_string(c.stats.round_prepare_usec.load()));
      add_pair(p->key_pairs, "MarketRoundClearUsec",
               std::to_string(c.stats.round_clear_usec.load()));
      add_pair(p->key_pairs, "MarketRoundUpdateUsec",
               std::to_string(c.stats.round_update_usec.load()));
      add_pair(p->key_pairs, "MarketRoundTotalUsec",
               std::to_string(c.stats.round_total_usec.load()));
      add_pair(p->key_pairs, "MarketRoundsRecorded",
               c.market_dir.empty() ? std::string("off (JobCompType is not jobcomp/planc)")
                                    : std::to_string(c.stats.rounds_recorded.load()));
      add_pair(p->key_pairs, "MarketRoundsWaiting", std::to_string(c.stats.rounds_waiting.load()));
      add_pair(p->key_pairs, "MarketRoundsRejected",
               std::to_string(c.stats.rounds_rejected.load()));
    }
  }
  add_pair(p->key_pairs, "Infusion", cfg.infusion.enabled ? "yes" : "no");
  if (cfg.infusion.enabled) {
    planc::MutexLock l(c.infusion_mu);
    add_pair(p->key_pairs, "InfusionIdle", c.infusion_shown.idle);
    add_pair(p->key_pairs, "InfusionReplicas",
             c.infusion_shown.replicas.empty() ? "none" : c.infusion_shown.replicas);
    add_pair(p->key_pairs, "InfusionLastOperation", c.infusion_shown.last_operation);
    add_pair(
        p->key_pairs, "InfusionNextAllowed",
        c.infusion_shown.next_allowed ? planc::format_utc(c.infusion_shown.next_allowed) : "now");
    add_pair(p->key_pairs, "InfusionOperationsLastHour",
             std::to_string(c.infusion_shown.ops_last_hour) + " of at most " +
                 std::to_string(cfg.infusion.settings.max_ops_per_hour));
    add_pair(p->key_pairs, "InfusionFailures", std::to_string(c.stats.infusion_failures.load()));
    add_pair(p->key_pairs, "InfusionPasses", std::to_string(c.stats.infusion_passes.load()));
    add_pair(p->key_pairs, "InfusionPassTotalUsec",
             std::to_string(c.stats.infusion_pass_usec.load()));
  }
  add_pair(p->key_pairs, "StarvationUpgrades", std::to_string(c.stats.upgrades.load()));
  add_pair(p->key_pairs, "StarvationReverts", std::to_string(c.stats.reverts.load()));
  add_pair(p->key_pairs, "FreeAttemptGpus", std::to_string(c.stats.free_attempt_gpus.load()));
  add_pair(p->key_pairs, "ScanCount", std::to_string(c.stats.scans.load()));
  add_pair(p->key_pairs, "ScanLastPendingJobs", std::to_string(c.stats.last_scan_jobs.load()));
  add_pair(p->key_pairs, "ScanLastUsec", std::to_string(c.stats.last_scan_usec.load()));
  add_pair(p->key_pairs, "ScanMaxUsec", std::to_string(c.stats.max_scan_usec.load()));
  add_pair(p->key_pairs, "ScanTotalUsec", std::to_string(c.stats.total_scan_usec.load()));
  add_pair(p->key_pairs, "ScanWalks", std::to_string(c.stats.scan_walks.load()));
  add_pair(p->key_pairs, "ScanWalkTotalUsec", std::to_string(c.stats.scan_walk_usec.load()));
  add_pair(p->key_pairs, "ScanLastWalkUsec", std::to_string(c.stats.scan_last_walk_usec.load()));
  add_pair(p->key_pairs, "ScanQueuedJobs", std::to_string(c.stats.scan_queued.load()));
  add_pair(p->key_pairs, "SampleCount", std::to_string(c.stats.samples.load()));
  add_pair(p->key_pairs, "SampleLockTotalUsec", std::to_string(c.stats.sample_lock_usec.load()));
  add_pair(p->key_pairs, "SampleLockMaxUsec", std::to_string(c.stats.sample_max_lock_usec.load()));
  add_pair(p->key_pairs, "SampleJobsVisitedTotal", std::to_string(c.stats.sample_visited.load()));
  add_pair(p->key_pairs, "SampleWalks", std::to_string(c.stats.sample_walks.load()));
  add_pair(p->key_pairs, "SampleWatchedJobs", std::to_string(c.stats.watched.load()));
  add_pair(p->key_pairs, "SampleLockWaitTotalUsec",
           std::to_string(c.stats.sample_lock_wait_usec.load()));
  add_pair(p->key_pairs, "MetricsWriteTotalUsec",
           std::to_string(c.stats.metrics_write_usec.load()));
  add_pair(p->key_pairs, "RunJournal",
           c.journal_dir.empty() ? "off (see slurmctld's log)" : c.journal_dir);
  add_pair(p->key_pairs, "PackGuaranteed", cfg.pack_guaranteed ? "yes" : "no");
  add_pair(p->key_pairs, "WholeNodeSpareP3", cfg.whole_node_spare_p3 ? "yes" : "no");
  add_pair(p->key_pairs, "PackWeightChanges", std::to_string(c.stats.weight_changes.load()));
  add_pair(p->key_pairs, "RunJournalRecords", std::to_string(c.stats.journal_records.load()));
  add_pair(p->key_pairs, "RunJournalDropped", std::to_string(c.stats.journal_dropped.load()));
  add_pair(p->key_pairs, "RunJournalMaxUsec", std::to_string(c.stats.journal_max_usec.load()));
  add_pair(p->key_pairs, "RunJournalOver1ms", std::to_string(c.stats.journal_slow.load()));
  add_pair(p->key_pairs, "RunJournalTotalUsec", std::to_string(c.stats.journal_total_usec.load()));
}

}  // namespace planc::ctld
