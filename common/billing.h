// Billing: what one run segment of a job costs, and how it is split into
// hours.  Pure: no Slurm, no database.  jobcomp/planc fills a Segment from
// the job record when a run ends; the store (common/bill_store.h) writes the
// Bill and its HourSlices; planc-bill reconcile builds Segments from sacct.
//
// Money is integer.  Prices are Micros (common/config.h, 1e-6 of the
// currency unit).  The rounding rule, in full:
//   1. A bill's amount is kept in micro-units (amount_micros): the exact
//      amount of the segment, a rational number, rounded once, half up, to
//      1e-6 of the currency.  At most half a micro-unit per bill is lost or
//      gained, so a million one-second runs differ from their exact sum by
//      at most 0.50 of the currency unit.
//   2. Hour slices split amount_micros with the floor rule of
//      split_by_hour, so the slices of a bill add up to it exactly.
//   3. Minor units (1/100 of the currency, e.g. fen or cents) appear only
//      where a sum is presented as money to pay: one invoice line (a line
//      of `planc-bill report`, a row of planc.usage_hourly) is rounded
//      once, half up, from the summed micro-units of its bills
//      (minor_of_micros).  A total is the sum of its rounded lines, as on
//      an invoice.
//   A bill's own amount_minor is that rule applied to one bill alone: for
//   reading a single bill, never to be summed.
//
// All functions are thread-safe (no shared state).
#ifndef PLANC_COMMON_BILLING_H_
#define PLANC_COMMON_BILLING_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"
#include "common/record.h"
#include "common/result.h"

namespace planc {

inline constexpr uint32_t kNoId = 0xfffffffe;  // Slurm's NO_VAL
inline constexpr int64_t kMinorPerUnit = 100;
inline constexpr int64_t kMicrosPerMinor = 1000000 / kMinorPerUnit;

// One allocated generic resource, as Slurm's gres_list_alloc has it:
// name "gpu", "mps" or "shard"; type e.g. "h800" or a MIG profile
// "1g.10gb"; count in that gres's own units.
struct GresUse {
  std::string name;
  std::string type;
  uint64_t count = 0;
  bool operator==(const GresUse&) const = default;
};

// One run of a job, from its start to the end of that run (completion,
// failure, timeout, cancel, preemption, node failure).
struct Segment {
  std::string cluster;
  uint32_t job_id = 0;
  uint32_t array_job_id = 0;       // 0: not an array
  uint32_t array_task_id = kNoId;  // kNoId: not an array task
  uint32_t het_job_id = 0;         // 0: not a het job
  uint32_t het_job_offset = kNoId;
  uint32_t segment = 0;  // 0 for the first run, then one more per requeue
  int64_t submit_time = 0;
  int64_t start_time = 0;
  int64_t end_time = 0;
  int64_t suspended_seconds = 0;
  uint32_t uid = 0;
  std::string user;
  std::string account;
  std::string qos;
  std::string partition;
  std::string nodes;
  uint32_t node_count = 0;
  // What the run ended as, as slurmdbd records it (sacct's State):
  // COMPLETED, FAILED, PREEMPTED, REQUEUED, NODE_FAIL, ...
  std::string state;
  // The job's raw wait status (Slurm's exit_code: 36608 is exit 143);
  // exit_code_of() turns it into what sacct shows.
  uint32_t wait_status = 0;
  std::string job_name;
  std::string tres_req;  // Slurm's formatted strings, for the record
  std::string tres_alloc;
  uint32_t cpus = 0;     // allocated
  uint64_t mem_mib = 0;  // allocated, whole job
  std::vector<GresUse> gres;
  bool ran = true;            // false: ended before it was given resources
  bool free_attempt = false;  // the starvation upgrade's free P2 attempt
  // preempt/planc says this run was ended by a preemption although Slurm's
  // state says otherwise: it was cancelled by its owner during its grace
  // (state CANCELLED).  A run that ended on its own during the grace has
  // its state set to PREEMPTED by preempt/planc instead.  Free, like a
  // PREEMPTED run of a preemptible tier.
  bool preempted = false;
  std::string admin_comment;
  bool operator==(const Segment&) const = default;
};

// A priced segment.  Quantities are exact integers:
//   card_micros          GPU cards x 1e6 (a 1g.10gb MIG slice is 142857)
//   card_micro_seconds   card_micros x billable seconds
//   core_seconds         allocated cores x billable seconds
//   mem_mib_seconds      allocated MiB x billable seconds
struct Bill {
  Segment seg;
  std::string tier;  // "P0".."P3"; "" when the QoS is not a tier
  int64_t billable_seconds = 0;
  int64_t card_micros = 0;
  int64_t card_micro_seconds = 0;
  int64_t core_seconds = 0;
  int64_t mem_mib_seconds = 0;
  std::string gpu_detail;  // e.g. "gpu:h800:8=8 cards", how the cards were counted
  std::string currency;
  Micros card_hour_price = 0;  // of the single GPU type; -1 when types are mixed
  Micros core_hour_price = 0;
  Micros mem_gib_hour_price = 0;
  uint32_t price_permille = 1000;  // the tier's multiplier
  int64_t amount_micros = 0;       // the amount, in 1e-6 of the currency (rule 1 above)
  int64_t amount_minor = 0;        // minor_of_micros(amount_micros): this bill alone, never summed
  std::string zero_reason;         // why amount_micros is 0, else ""; never empty on a zero bill
  std::string note;                // anything the reader should know (e.g. a missing weight)
  // The measured-usage track (common/tres_usage.h): what the run used, as
  // Slurm's job accounting measured it, filled after the run from slurmdbd
  // by `planc-bill measure`, never by pricing.  Not measured: the null
  // values below (NULL in planc.bill), never 0.
  int64_t measured_at = 0;              // when measure read it (unix s); 0: not yet
  int64_t used_cpu_micro_seconds = -1;  // sacct's TotalCPU of the run's steps, 1e-6 s
  int64_t max_rss_bytes = -1;           // sacct's MaxRSS: largest of any step
  std::string tres_usage_in_tot;        // the steps' TRESUsageInTot summed, by name; "": none
  // GPU utilisation needs Slurm's NVML support (gpu/nvml), which Debian's
  // 22.05 build lacks: always -1 (NULL) on such a cluster.
  int64_t gpu_util_milli_percent = -1;
};

// Prices a segment with the prices and tier factors in `cfg`.
// The zero_reason of a segment that ended before it was given resources
// (Segment::ran false); a stored bill says it was not run only by this.
inline constexpr const char kNeverRan[] = "never ran";

// Free by rule (amount 0, quantities still recorded, zero_reason says why):
//   never ran; a preemptible tier's segment ended by preemption (state
//   PREEMPTED, or `preempted` set by preempt/planc); a run
//   ended by a node failure (the provider's fault); the free
//   starvation-upgrade attempt; zero billable seconds.
// Zero by arithmetic, also with a zero_reason: nothing billable allocated
//   (no cards, cores or memory); prices or tier factor of 0 for what it
//   held; an exact amount under half a micro-unit.
Bill price_segment(const PlancConfig& cfg, const Segment& seg);

// Micro-units to minor units, rounded half up (rule 3 above): 5000 -> 1,
// 4999 -> 0.  `micros` is never negative.
int64_t minor_of_micros(int64_t micros);

// A run's exit, from its raw wait status.  `status` and `signal` are
// POSIX's WEXITSTATUS (0 unless it exited) and WTERMSIG (0 unless a signal
// killed it): exit 143 is status 143, signal 0.  `text` is what sacct
// prints as ExitCode (src/sacct/print.c): "<status>:<signal>" where a
// status of 128 or more loses 128 (a shell reporting a signal), so exit
// 143 reads "15:0" and a SIGKILL "0:9".
struct ExitCode {
  uint32_t status = 0;
  uint32_t signal = 0;
  std::string text;
  bool operator==(const ExitCode&) const = default;
};
ExitCode exit_code_of(uint32_t wait_status);

// Cards of one allocated gres, in micros: gpu counts whole cards (a type
// with a CardWeight is a fraction of one, e.g. MIG profiles); mps counts
// MpsPerCard per card; shard counts ShardsPerCard per card.  0 for other
// gres, and for shards when ShardsPerCard is unset (note says so).
int64_t card_micros_of(const PlancConfig& cfg, const GresUse& g, std::string* note);

// A bill's share of one clock hour (UTC hour start).  Quantities and the
// amount are split in proportion to the wall-clock seconds of the segment in
// that hour, with the rule floor(Q*t_end/T) - floor(Q*t_start/T), so the
// slices of a bill always add up to it exactly.
struct HourSlice {
  int64_t hour = 0;  // unix time of the hour's start
  int64_t seconds = 0;
  int64_t card_micro_seconds = 0;
  int64_t core_seconds = 0;
  int64_t mem_mib_seconds = 0;
  int64_t amount_micros = 0;
};
std::vector<HourSlice> split_by_hour(const Bill& bill);

// "12.34" from 1234 minor units; "-0.05" from -5.
std::string format_minor(int64_t minor);
// A micro-unit quantity as a decimal with 6 places: 4469 -> "0.004469".
// Card-seconds (from card_micro_seconds) and exact amounts.
std::string format_micros6(int64_t micros);
inline std::string format_card_seconds(int64_t card_micro_seconds) {
  return format_micros6(card_micro_seconds);
}

// Replaces bytes that are not valid UTF-8 with U+FFFD in the segment's text
// fields: Slurm accepts any bytes in a job name, PostgreSQL (UTF8) does not,
// and one such name must not stop billing.
void make_text_valid_utf8(Segment* seg);

// The spool's record format: one line per segment (common/record.h),
// its fields made from the bill's column table (common/bill_schema.cc).
// parse_segment reads every record version written so far (planc-seg-1,
// planc-seg-2, ...); a damaged or unknown record is kCorrupt.
std::string serialize_segment(const Segment& seg);
Result<Segment> parse_segment(std::string_view line);

}  // namespace planc

#endif  // PLANC_COMMON_BILLING_H_
