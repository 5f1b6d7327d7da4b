// planc.conf: the Plan C policy numbers Slurm has no notion of.
//
// Who may use which tier, and an account's default tier, are NOT here: they
// come from slurmdbd (the association's QoS list and DefaultQOS), so admins
// manage access in one place.  planc.conf holds the tier table (names,
// priorities, grace, price factors, the preemption matrix) and the policy
// numbers the plugins need.  Syntax follows slurm.conf: Key=Value pairs,
// '#' comments, case-insensitive keys, values in double quotes may hold
// spaces.  A line starting with Tier= describes one tier; any other line
// holds global keys.  Every key has a default from the policy documents, so
// an empty file is valid; an unknown key or bad value is an error.
//
// Errors read "<file>:<line>: key '<Key>': <what is wrong and what to do>".
// PlancConfig is a plain value; share it as shared_ptr<const PlancConfig>.
#ifndef PLANC_COMMON_CONFIG_H_
#define PLANC_COMMON_CONFIG_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/infusion.h"
#include "common/result.h"
#include "common/tier.h"

namespace planc {

// `s` with ASCII letters in lower case (GPU types, QoS names, keys).
std::string ascii_lower(std::string_view s);

// Prices are fixed-point: 1 currency unit = 1,000,000 micros, so a price of
// 0.0125 per core-hour is exact.  Bill amounts are rounded to minor units
// (cents) by the billing code, never held as floating point.
using Micros = int64_t;
inline constexpr Micros kMicrosPerUnit = 1000000;

struct Prices {
  std::string currency = "CNY";
  // List price per card-hour by GPU type (lower-case, as in gres.conf Type=);
  // a type not listed uses default_card_hour.  H800 at 20 per card-hour
  // (policy 000, section 5: floor 10 is "-50%"; 12 is "-40%").
  std::map<std::string, Micros> card_hour{{"h800", 20 * kMicrosPerUnit}};
  Micros default_card_hour = 20 * kMicrosPerUnit;
  Micros card_hour_floor = 10 * kMicrosPerUnit;
  Micros core_hour = 100000;    // 0.10
  Micros mem_gib_hour = 10000;  // 0.01
  // Fractional GPUs.  A gres/gpu type listed here is that share of a card
  // (MIG profiles: 1g.10gb is 1/7 of an H800/A100); other types are whole
  // cards.  gres/mps counts MpsPerCard per card; gres/shard ShardsPerCard
  // per card (as gres.conf configures; 0 = not set, shards then bill no
  // cards and the bill's note says so).
  std::map<std::string, Micros> card_weight;
  uint32_t mps_per_card = 100;
  uint32_t shards_per_card = 0;
};

// A spot cap that is not set.
inline constexpr uint64_t kUnlimited = UINT64_MAX;

// The P2 spot market's settings (common/market.h explains them).
struct FloorPoint {
  uint32_t vacancy_permille = 0;     // 0..1000
  uint32_t multiplier_permille = 0;  // of CardHourPriceFloor
};
struct MarketConfig {
  bool enabled = false;                 // Market=yes: the P2 market is open
  uint32_t interval_seconds = 15 * 60;  // MarketInterval
  uint32_t min_permille = 300;          // MarketMinFraction, of the list price
  std::vector<FloorPoint> floor_curve{{0, 1000}, {300, 800}, {600, 600}};  // MarketFloorCurve
  uint32_t lock_ahead_seconds = 24 * 3600;  // --lock-price: --begin at most this far ahead
  // The large-bid rule (common/market.h): a bid short of room this long
  // holds what is left of its market until it fits.
  uint32_t reserve_after_seconds = 3600;  // MarketReserveAfter
};

// Capacity infusion (policy 000, section 4; issue 16): serving pools that
// idle GPUs grow, one Pool= line each, and the thresholds, cooldown and
// hourly limit (common/infusion.h).  Parsed and checked; nothing acts on it
// yet (the controller in slurmctld/planc is not built).
struct PoolConfig {
  std::string name;
  TierId tier = TierId::kP1;  // P1 (guaranteed serving) or P3 (spot serving)
  std::string account;        // the platform's own account and user the
  std::string user;           // replicas run as
  std::string script;         // batch script that starts one replica (absolute path)
  uint32_t gpus_per_replica = 1;
  uint32_t min_replicas = 0, max_replicas = 1;
  uint32_t drain_grace_seconds = 30;  // SIGTERM to kill when the pool shrinks
  std::string output;  // replica's stdout (sbatch -o); empty: <home>/planc-pool-<name>-%j.out
  size_t line = 0;     // planc.conf line, for messages
};

// What a P1 pool's DrainGrace leaves of SlaStartSeconds for the rest of a
// reclaim: the kill, the node's cleanup and a scheduling pass.
inline constexpr uint32_t kReclaimMarginSeconds = 10;

// Why slurmctld may not run a pool's replicas as its User (root, checked
// when planc.conf is read, or slurmctld's own SlurmUser): none when it may.
std::optional<std::string> pool_user_refusal(const PoolConfig& pool, std::string_view slurm_user);

struct InfusionConfig {
  bool enabled = false;  // Infusion=yes
  InfusionSettings settings;
  std::vector<PoolConfig> pools;
};

struct PlancConfig {
  TierTable tiers = TierTable::defaults();
  // Tier for a job with no --qos whose association has no DefaultQOS.
  TierId default_tier = TierId::kP3;
  // P0+P1 together never hold more than this share of the cluster's GPUs.
  // Enforced by Slurm itself: job_submit/planc routes guaranteed-tier jobs
  // into GuaranteedPartition, whose partition QoS (GuaranteedCapQOS) has
  // GrpTRES=gres/gpu=<percent of the GPUs> (planc-conf sacctmgr --gpus N).
  // An empty partition turns the routing, and so the cap, off.
  uint32_t guaranteed_cap_percent = 80;
  std::string guaranteed_partition;
  std::string guaranteed_cap_qos = "planc-guaranteed-cap";
  // A job preempted this many times within the window is not chosen again.
  uint32_t preempt_max_count = 3;
  uint32_t preempt_window_seconds = 24 * 3600;
  // The P3 preemption budget (common/preempt_budget.h): preemptions of P3
  // runs within the window stay under this share (percent) of the P3 runs
  // running.  0: no budget.
  uint32_t p3_preempt_max_percent = 0;
  uint32_t p3_preempt_window_seconds = 3600;
  // From this share on (percent, at most the budget's), a guaranteed
  // preemptor takes P2 victims before P3 ones, keeping the rest of the
  // budget for guaranteed jobs with no P2 victim in reach.  By default
  // the budget's own share: P2 first only once it is spent.
  uint32_t p3_preempt_soft_percent = 100;
  uint32_t p3_soft_percent() const {
    return std::min(p3_preempt_soft_percent, p3_preempt_max_percent);
  }
  // Part-node jobs go first to nodes already holding guaranteed work,
  // keeping the others clearable for whole-node guaranteed jobs
  // (common/placement.h): slurmctld/planc steers the nodes' weights.
  bool pack_guaranteed = false;
  // A job that needs whole nodes clears the nodes of fewer P3 runs first
  // (one counting as none), then of fewer runs (NodeCrowding::crowd);
  // off: the fewest runs, whatever their tier.
  bool whole_node_spare_p3 = false;
  // A victim that exits with this code during its grace says it finished
  // its real work: it stays COMPLETED and is billed, not requeued.  Any
  // other ending during the grace (exit 0 included) is treated as the
  // preemption it is.  -1: no such code (every ending is a preemption).
  int32_t grace_finished_exit_code = 99;
  // A P3 job pending longer than this gets one free attempt as P2.
  uint32_t starvation_threshold_seconds = 30 * 60;
  uint32_t starvation_interval_seconds = 60;
  uint32_t starvation_max_per_interval = 10;
  // Free attempts together (pending and running) hold at most this share
  // of the pool's GPUs (percent): an upgrade that would pass it waits.
  uint32_t starvation_max_share_percent = 10;
  // Policy 9's "resource allocated in 40 s": a guaranteed job that starts
  // within this of becoming eligible meets the SLA (planc-exporter).
  uint32_t sla_start_seconds = 40;
  // Daily spot cap per account, in card-seconds per day by tier (only P2
  // and P3 may have one; planc.conf gives card-hours).  See spot_cap.h.
  std::array<uint64_t, kTierCount> spot_cap_card_seconds{kUnlimited, kUnlimited, kUnlimited,
                                                         kUnlimited};
  uint32_t spot_reset_seconds = 0;             // local time of day: 00:00
  int32_t spot_utc_offset_seconds = 8 * 3600;  // UTC+08:00 (Beijing)
  uint32_t spot_day_seconds = 86400;           // shorter only for tests
  Prices prices;
  MarketConfig market;
  InfusionConfig infusion;
  // Where jobcomp/planc keeps its spool (common/spool.h): an absolute
  // path, or empty for <StateSaveLocation>/planc_jobcomp.  Read at start.
  std::string spool_dir;
};

// The policy's invariants a valid planc.conf may still break (admins may
// choose to), one warning each, naming the invariant, e.g.
//   "P0 (p0-lease) is preemptible (Preemptible=yes): breaks the policy's
//    invariant \"P0 and P1 are never preempted\""
// planc-conf check prints them; each plugin logs them when it loads.
std::vector<std::string> policy_warnings(const PlancConfig& cfg);

// Every key the parser knows, in the parser's own order: global keys by
// name ("DefaultTier"), a Tier line's keys as "Tier:QOS", a Pool line's as
// "Pool:Account" ("Tier" and "Pool" themselves start those lines).
// planc-conf keys prints them; the man page test checks planc.conf(5)
// against them.
std::vector<std::string> config_keys();

// Parses planc.conf text; `filename` only labels error messages.
Result<PlancConfig> parse_config(std::string_view text, std::string_view filename);

// Reads and parses a file.  A missing or unreadable file is an error.
Result<PlancConfig> load_config(const std::string& path);

// Where planc.conf lives: $PLANC_CONF when set, else beside slurm.conf.
std::string planc_conf_path(std::string_view slurm_conf_path);

// GPUs P0+P1 may hold together on a cluster of `total_gpus`: rounded down,
// so the cap is never exceeded (80% of 32 is 25).
uint32_t guaranteed_gpu_cap(const PlancConfig& cfg, uint32_t total_gpus);

// "20.00" -> 20000000 micros.  At most 6 decimals, no sign, no exponent.
std::optional<Micros> parse_decimal_micros(std::string_view s);
// "08:00" or "08:00:30" -> seconds after midnight.
std::optional<uint32_t> parse_time_of_day(std::string_view s);
// "UTC", "UTC+8", "UTC+08:00", "+08:00", "-05:30" -> seconds east of UTC.
std::optional<int32_t> parse_utc_offset(std::string_view s);
// "30", "30s", "5min", "24h", "1d" -> seconds.
std::optional<uint32_t> parse_duration(std::string_view s);
// Micros as a decimal string with at least 2 decimals: 350000 -> "0.35".
std::string format_micros(Micros m);

}  // namespace planc

#endif  // PLANC_COMMON_CONFIG_H_
