// What a run actually used, as Slurm's job accounting measured it, from
// slurmdbd's step records: the measured-usage track beside the bill's
// allocated (billed) usage.
//
// slurmdbd keeps each step's usage as TRES strings of ids, "1=5012,2=1843200"
// (TRESUsageInTot, TRESUsageInMax, ...; the ids name rows of slurmdbd's TRES
// table: 1 cpu, 2 mem, ...).  Units are Slurm's: cpu in CPU-milliseconds,
// mem, vmem and fs/disk in bytes, energy in joules, pages a count.
// Slurm-generated, so nothing a user types can reach them; still, an item
// that is not "<id>=<count>" is skipped and counted, not trusted.
//
// Pure (no Slurm, no libpq); thread-safe (no state).
#ifndef PLANC_COMMON_TRES_USAGE_H_
#define PLANC_COMMON_TRES_USAGE_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace planc {

// TRES id -> count.
using TresCounts = std::map<uint32_t, uint64_t>;

struct ParsedTres {
  TresCounts counts;
  int malformed = 0;  // items skipped: not "<id>=<count>"
};

// "1=5012,2=1843200" -> {1: 5012, 2: 1843200}.  Counts Slurm writes for
// "not measured" (NO_VAL64, INFINITE64: 0xfffffffffffffffe/f) are left out:
// absent, not a number.  Empty text: no counts.
ParsedTres parse_tres_counts(std::string_view text);

// What slurmdbd's TRES table calls an id: type "cpu", "mem", "fs",
// "gres"; name "", "", "disk", "gpu".
struct TresName {
  std::string type, name;
  // "cpu", "mem", "fs/disk", "gres/gpu": how sacct names it.
  std::string key() const { return name.empty() ? type : type + "/" + name; }
};
using TresNames = std::map<uint32_t, TresName>;

// One step of a run, as slurmdbd returned it.
struct StepUsage {
  bool finished = false;          // slurmdbd has the step's end
  int64_t cpu_micro_seconds = 0;  // user + system CPU time (sacct's TotalCPU), 1e-6 s
  std::string usage_in_tot;       // TRESUsageInTot, raw ids
  std::string usage_in_max;       // TRESUsageInMax, raw ids (mem: the step's MaxRSS)
};

// A run's measured usage, from its steps.
struct RunUsage {
  bool measured = false;           // some finished step carries job accounting data
  int64_t cpu_micro_seconds = -1;  // sum over finished steps, as sacct's TotalCPU; -1: none
  int64_t max_rss_bytes = -1;      // largest MaxRSS of any finished step; -1: none
  std::string usage_in_tot;        // sum of the finished steps' TRESUsageInTot, by name
  int steps_without_data = 0;      // finished steps with no accounting data
  int unfinished_steps = 0;        // steps slurmdbd has no end for
  int malformed = 0;               // TRES items skipped
};

// The run's usage from its steps: what sacct shows for the job (TotalCPU
// sums the finished steps, as src/sacct/options.c does; MaxRSS the largest
// of any step, which is the peak resident set of one task, not of the
// whole step).  usage_in_tot is "key=count,..." sorted by key, the sum of
// the finished steps' TRESUsageInTot per TRES in Slurm's units (above);
// an id `names` does not know is shown as "tres<id>".  A step carries
// data when it has CPU time (from the task's rusage at exit) or its
// TRESUsageInTot has a cpu or mem count (from jobacct_gather's polls; a
// step that ended before the first poll has none, and so no MaxRSS).
// With JobAcctGatherType=jobacct_gather/none a step has neither, and the
// run is not measured (all fields stay "none"), never 0.
RunUsage summarize_steps(const std::vector<StepUsage>& steps, const TresNames& names);

// "key=count,..." of `counts`, sorted by key (as above).
std::string format_tres_usage(const TresCounts& counts, const TresNames& names);

}  // namespace planc

#endif  // PLANC_COMMON_TRES_USAGE_H_
