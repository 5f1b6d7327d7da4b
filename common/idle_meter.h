// The pool's idle GPUs over time: the one meter the P2 market (the vacancy
// that moves the floor, common/market.h), capacity infusion (the idle share
// that grows the pools, common/infusion.h) and the metrics (idle-threshold
// crossings, common/metrics_snapshot.h) all read.
//
// slurmctld/planc's worker feeds it one sample per 5 s sample of the jobs:
// the pool's GPUs and those idle, neither allocated to a running job nor
// promised to a replica infusion submitted and Slurm has not started yet.
// Each sample's figures hold until the next one (time-weighted means).
// Pure: no Slurm header, no clock of its own.  Not thread-safe: the
// worker's.
#ifndef PLANC_COMMON_IDLE_METER_H_
#define PLANC_COMMON_IDLE_METER_H_

#include <cstdint>
#include <ctime>
#include <deque>
#include <optional>

#include "common/metrics_snapshot.h"  // IdleCrossings

namespace planc {

class IdleMeter {
 public:
  // A sample.  One whose time is before the last one's is ignored (the
  // clock went back).
  void observe(time_t now, uint32_t idle, uint32_t pool);
  // How long samples are kept: at least an hour (infusion's hourly view),
  // longer for a market interval that is.
  void keep_for(uint32_t seconds) { keep_ = seconds > 3600 ? seconds : 3600; }

  struct Measure {
    uint32_t idle_gpus = 0, pool_gpus = 0;  // means, rounded down (pool: to nearest)
    uint32_t idle_permille = 0;             // idle GPU-seconds per pool GPU-second
  };
  // Over the last `seconds` before `now`; nothing until the samples cover
  // the whole window (one sample decides nothing).
  std::optional<Measure> measure(time_t now, uint32_t seconds) const;
  // Over [from, now], from the first sample on when it came later than
  // `from`; nothing when no sample came before `now`.
  std::optional<Measure> measure_since(time_t from, time_t now) const;
  // The last sample's figures.
  uint32_t idle_now() const { return samples_.empty() ? 0 : samples_.back().idle; }
  uint32_t pool_now() const { return samples_.empty() ? 0 : samples_.back().pool; }
  // Crossings of the idle thresholds, counted at each sample.
  const IdleCrossings& crossings() const { return crossings_; }

 private:
  struct Sample {
    time_t at;
    uint32_t idle, pool;
  };
  std::optional<Measure> mean(time_t from, time_t now) const;
  std::deque<Sample> samples_;  // oldest first
  uint32_t keep_ = 3600;
  IdleCrossings crossings_;
};

}  // namespace planc

#endif  // PLANC_COMMON_IDLE_METER_H_
