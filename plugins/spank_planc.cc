// spank/planc: the P2 market's sbatch/salloc/srun options (issue 15).
//
//   --bid=PRICE       a card-hour price for a P2 job
//   --lock-price      with --begin up to 24 h ahead: the price of booking
//   --spot-fallback   a preempted P2/P3 run comes back in the account's
//                     guaranteed tier
//
// This plugin only carries what the user typed to slurmctld, in the job's
// SPANK job-control environment (PLANC_BID, PLANC_LOCK_PRICE,
// PLANC_SPOT_FALLBACK); job_submit/planc checks it and refuses bad input
// with a message sbatch prints.  Nothing is checked here, so the rules and
// their messages live in one place (common/market.cc) and a job submitted
// through libslurm without this plugin is checked the same way.
//
// Only Slurm's public SPANK API (slurm/spank.h): it is loaded by sbatch,
// salloc and srun on submit hosts and by slurmstepd on the nodes
// (plugstack.conf), where it does nothing.
extern "C" {  // slurm/spank.h declares its C functions without extern "C"
#include <slurm/spank.h>
}

#include <string>

#define PLANC_SPANK_EXPORT extern "C" __attribute__((visibility("default")))

PLANC_SPANK_EXPORT const char plugin_name[] = "planc";
PLANC_SPANK_EXPORT const char plugin_type[] = "spank";
PLANC_SPANK_EXPORT const unsigned int plugin_version = SLURM_VERSION_NUMBER;
PLANC_SPANK_EXPORT const unsigned int spank_plugin_version = 1;

namespace {

enum Option { kBid = 1, kLockPrice, kSpotFallback };

std::string g_bid;
bool g_bid_given = false, g_lock_price = false, g_spot_fallback = false;

int on_option(int val, const char* optarg, int remote) {
  if (remote) return ESPANK_SUCCESS;
  switch (val) {
    case kBid:
      g_bid = optarg ? optarg : "";
      g_bid_given = true;
      break;
    case kLockPrice:
      g_lock_price = true;
      break;
    case kSpotFallback:
      g_spot_fallback = true;
      break;
    default:
      break;
  }
  return ESPANK_SUCCESS;
}

struct spank_option g_options[] = {
    {const_cast<char*>("bid"), const_cast<char*>("PRICE"),
     const_cast<char*>("Plan C: bid PRICE per card-hour in the P2 spot market (P2 jobs; at least "
                       "the market's minimum, at most the list price)"),
     1, kBid, on_option},
    {const_cast<char*>("lock-price"), nullptr,
     const_cast<char*>("Plan C: with --begin up to 24 h ahead, pay the P2 price of booking time"),
     0, kLockPrice, on_option},
    {const_cast<char*>("spot-fallback"), nullptr,
     const_cast<char*>("Plan C: when a P2/P3 run is preempted, requeue the job in the "
                       "account's guaranteed tier (billed at that tier's price)"),
     0, kSpotFallback, on_option},
    SPANK_OPTIONS_TABLE_END,
};

}  // namespace

PLANC_SPANK_EXPORT int slurm_spank_init(spank_t sp, int ac, char** av) {
  (void)ac;
  (void)av;
  for (struct spank_option* o = g_options; o->name; o++)
    if (spank_option_register(sp, o) != ESPANK_SUCCESS) {
      slurm_error("spank/planc: cannot register --%s", o->name);
      return -1;
    }
  return 0;
}

// After the options are parsed, in sbatch/salloc (allocator) and srun
// (local): into the job's control environment, which reaches job_submit.
PLANC_SPANK_EXPORT int slurm_spank_init_post_opt(spank_t sp, int ac, char** av) {
  (void)ac;
  (void)av;
  const spank_context_t ctx = spank_context();
  if (ctx != S_CTX_ALLOCATOR && ctx != S_CTX_LOCAL) return 0;
  struct {
    bool set;
    const char* name;
    const char* value;
  } vars[] = {{g_bid_given, "PLANC_BID", g_bid.c_str()},
              {g_lock_price, "PLANC_LOCK_PRICE", "1"},
              {g_spot_fallback, "PLANC_SPOT_FALLBACK", "1"}};
  for (const auto& v : vars)
    if (v.set && spank_job_control_setenv(sp, v.name, v.value, 1) != ESPANK_SUCCESS) {
      slurm_error("spank/planc: cannot pass %s to slurmctld", v.name);
      return -1;
    }
  return 0;
}
