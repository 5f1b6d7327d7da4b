// The daily spot cap: per account, the card-hours each spot tier (P2, P3)
// may use per day (policy 000, section 6: "each customer's spot use per day
// is capped, against abuse").
//
// A day starts at SpotCapResetTime in SpotCapTimeZone (a fixed UTC offset)
// and lasts SpotCapDayLength (24 h; shorter only in tests).  Use is
// card-seconds: GPUs x seconds run within the day, counting running jobs'
// use so far; a job running across the reset counts in each day for its
// part.  A free starvation attempt (P3 job upgraded to P2) counts as P3, the
// tier its owner chose.  A submission to a capped tier is refused once the
// account's use of that tier today has reached the cap.
//
// SpotLedger is fed by slurmctld/planc's sampler: every few seconds, every
// running spot job.  Between samples a running job's use is extrapolated,
// so SpotUsage::used() is exact for running jobs; a job that ends is counted
// to its end time when Slurm still knows it, else up to the last sample
// (a requeued job loses its end time): at most one sample interval of its
// last run is missed, in the customer's favour.  Plain values, not
// thread-safe; the plugin publishes immutable SpotUsage snapshots.
#ifndef PLANC_COMMON_SPOT_CAP_H_
#define PLANC_COMMON_SPOT_CAP_H_

#include <array>
#include <cstdint>
#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/config.h"
#include "common/preempt_policy.h"
#include "common/result.h"

namespace planc {

// When spot days start: planc.conf's SpotCapResetTime, SpotCapTimeZone and
// SpotCapDayLength.
struct SpotDayRule {
  int32_t utc_offset = 0;   // seconds east of UTC
  uint32_t reset = 0;       // local time of day the day starts, in seconds
  uint32_t length = 86400;  // seconds
  static SpotDayRule of(const PlancConfig& cfg) {
    return {cfg.spot_utc_offset_seconds, cfg.spot_reset_seconds, cfg.spot_day_seconds};
  }
  // The day containing `t` (grows by one each day), when it started, and
  // when it ends (the next reset).
  int64_t index(time_t t) const;
  time_t start(time_t t) const;
  time_t next_reset(time_t t) const { return start(t) + length; }
};

struct RunningSpotJob {
  uint32_t job_id = 0;
  std::string account;
  TierId tier = TierId::kP3;  // the tier it counts in
  uint32_t gpus = 0;
  time_t start_time = 0;  // of the current run
};

// What job_submit/planc reads: use per account and tier, as of a sample,
// plus the GPUs running then, to extrapolate to `now`.
class SpotUsage {
 public:
  // Card-seconds `account` has used in `tier` in the day containing `now`.
  uint64_t used(std::string_view account, TierId tier, time_t now) const;
  time_t as_of() const { return as_of_; }

 private:
  friend class SpotLedger;
  struct Entry {
    uint64_t settled = 0;       // card-seconds of the day up to as_of_
    uint32_t running_gpus = 0;  // GPUs of running jobs at as_of_
  };
  SpotDayRule rule_;
  time_t as_of_ = 0;
  std::unordered_map<std::string, std::array<Entry, kTierCount>> by_account_;
};

class SpotLedger {
 public:
  explicit SpotLedger(SpotDayRule rule) : rule_(rule) {}

  // One sample at `now`.  `running`: every spot job running now.  Tracked
  // jobs not in it have ended; `ended_at` gives the end time of those Slurm
  // still knows (0 or absent: count up to the last sample).
  void sample(time_t now, const std::vector<RunningSpotJob>& running,
              const std::map<uint32_t, time_t>& ended_at);
  // Jobs counted as running at the last sample.
  std::vector<uint32_t> tracked_ids() const;
  SpotUsage usage() const;
  time_t as_of() const { return as_of_; }

  // State file text (common/state_file.h framing); parse() restores it.
  std::string serialize() const;
  static Result<SpotLedger> parse(std::string_view text, SpotDayRule rule);

 private:
  struct Tracked {
    std::string account;
    TierId tier;
    uint32_t gpus;
    time_t counted_until;
  };
  void add(const std::string& account, TierId tier, uint32_t gpus, time_t from, time_t to,
           time_t day_start);

  SpotDayRule rule_;
  time_t as_of_ = 0;
  std::map<std::pair<std::string, TierId>, uint64_t> settled_;  // the day of as_of_
  std::map<uint32_t, Tracked> tracked_;
};

// True when `tier` has a cap (only spot tiers can).
bool spot_capped(const PlancConfig& cfg, TierId tier);

// The refusal for a submission to `tier` by the account of `ent` with
// `used` card-seconds today at `now`; nullopt when the cap is not reached.
// It names a guaranteed tier the account may use (advised_tier), or says
// it has none and whom to ask.
std::optional<std::string> spot_cap_refusal(const PlancConfig& cfg, const Entitlement& ent,
                                            TierId tier, uint64_t used, time_t now);

// "unlimited" or "2.50 card-hours/day", for logs and scontrol show config.
std::string describe_spot_cap(const PlancConfig& cfg, TierId tier);
// "00:00:00 UTC+08:00, every 86400 s".
std::string describe_spot_day(const PlancConfig& cfg);

// Card-seconds as card-hours, "1.25" (at least 2, at most 3 decimals, rounded down).
std::string format_card_hours(uint64_t card_seconds);
// 16200 -> "04:30:00".
std::string format_time_of_day(uint32_t seconds);
// "+08:00".
std::string format_utc_offset(int32_t seconds);

}  // namespace planc

#endif  // PLANC_COMMON_SPOT_CAP_H_
