// planc-conf: check planc.conf and turn its tier table into Slurm QoS.
//
//   planc-conf check FILE      parse FILE; print the tier table or the error,
//                              and on stderr a warning for each of the
//                              policy's invariants the file breaks; with
//                              capacity infusion's pools, ask slurmdbd
//                              (sacctmgr) that each pool's account and user
//                              may use the pool's tier
//   planc-conf sacctmgr FILE [--gpus N]
//                              print sacctmgr arguments, one command a line,
//                              that create or update the four tier QoS and,
//                              given the cluster's GPU count, the partition
//                              QoS of the guaranteed cap:
//                              ... | while read -r l; do sacctmgr -i $l; done
//   planc-conf get FILE KEY    print one setting (for scripts):
//                              GuaranteedPartition, GuaranteedCapQOS
//   planc-conf keys            every key planc.conf may hold, one a line
//   planc-conf --help | --version
// Exit status: 0 ok, 1 bad config, 2 usage.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "planc_config.h"  // PACKAGE_VERSION

#include "common/config.h"
#include "common/file_system.h"
#include "common/spot_cap.h"
#include "tools/run_command.h"

namespace {

constexpr const char* kUsage =
    "usage: planc-conf check FILE\n"
    "       planc-conf sacctmgr FILE [--gpus N]\n"
    "       planc-conf get FILE GuaranteedPartition|GuaranteedCapQOS|SpoolDir\n"
    "       planc-conf keys\n"
    "       planc-conf --help | --version\n";

int usage(const std::string& why = "") {
  if (!why.empty()) std::fprintf(stderr, "planc-conf: %s\n", why.c_str());
  std::fputs(kUsage, stderr);
  return 2;
}

int help() {
  std::fputs(kUsage, stdout);
  std::fputs(
      "\n"
      "  check FILE     parse FILE and print the tier table and every setting, or the\n"
      "                 error with its line; warn (stderr) for each policy invariant\n"
      "                 the file breaks; ask slurmdbd about infusion's pools\n"
      "  sacctmgr FILE  print sacctmgr arguments, one command a line, that create or\n"
      "                 update the tier QoS and, with --gpus N (the cluster's GPUs),\n"
      "                 the guaranteed cap's partition QoS\n"
      "  get FILE KEY   print one setting, for scripts\n"
      "  keys           print every key planc.conf may hold (Tier:KEY and Pool:KEY\n"
      "                 for the keys of Tier and Pool lines)\n"
      "\n"
      "Exit status: 0 ok, 1 bad configuration, 2 usage.  See planc-conf(8), planc.conf(5).\n",
      stdout);
  return 0;
}

// slurmctld's SlurmUser, from `scontrol show config` ("SlurmUser = slurm(64030)"),
// "" when slurmctld cannot be asked.
std::string slurm_user() {
  std::string why;
  auto out = planc::tools::run_command({"scontrol", "show", "config"}, &why);
  if (!out) return "";
  std::istringstream in(*out);
  for (std::string l; std::getline(in, l);) {
    if (l.rfind("SlurmUser ", 0) != 0) continue;
    const size_t eq = l.find("= ");
    if (eq == std::string::npos) return "";
    std::string v = l.substr(eq + 2);
    return v.substr(0, v.find('('));
  }
  return "";
}

// Each pool runs as a user that is neither root nor slurmctld's SlurmUser,
// from a script only root may change, and its account and user may use its
// tier's QoS, as slurmdbd says (the association's QOS list).  Returns false
// when one may not; an unreachable slurmdbd is a warning (not checked),
// not an error.
bool check_pools(const char* file, const planc::PlancConfig& cfg) {
  bool ok = true;
  const std::string slurm = cfg.infusion.pools.empty() ? std::string() : slurm_user();
  for (const planc::PoolConfig& p : cfg.infusion.pools) {
    const planc::Tier& t = cfg.tiers.tier(p.tier);
    if (auto refused = planc::pool_user_refusal(p, slurm)) {
      std::fprintf(stderr, "planc-conf: %s:%zu: %s\n", file, p.line, refused->c_str());
      ok = false;
    }
    std::string script;
    if (auto bad = planc::read_trusted_script(p.script, &script)) {
      std::fprintf(stderr, "planc-conf: %s:%zu: pool '%s': %s\n", file, p.line, p.name.c_str(),
                   bad->c_str());
      ok = false;
    }
    std::string why;
    auto out = planc::tools::run_command({"sacctmgr", "-n", "-P", "show", "association", "where",
                                          "account=" + p.account, "user=" + p.user, "format=QOS"},
                                         &why);
    if (!out) {
      std::fprintf(stderr,
                   "planc-conf: warning: %s:%zu: pool '%s': cannot ask slurmdbd whether account %s "
                   "(user %s) may use %s (%s): %s; not checked\n",
                   file, p.line, p.name.c_str(), p.account.c_str(), p.user.c_str(), t.qos.c_str(),
                   t.label.c_str(), why.c_str());
      continue;
    }
    std::vector<std::string> lines;
    std::istringstream in(*out);
    for (std::string l; std::getline(in, l);)
      if (!l.empty()) lines.push_back(l);
    if (lines.empty()) {
      std::fprintf(stderr,
                   "planc-conf: %s:%zu: pool '%s': user %s has no association in account %s "
                   "(sacctmgr add user %s account=%s qos=%s)\n",
                   file, p.line, p.name.c_str(), p.user.c_str(), p.account.c_str(), p.user.c_str(),
                   p.account.c_str(), t.qos.c_str());
      ok = false;
      continue;
    }
    bool may = false;
    for (const std::string& l : lines) {
      std::istringstream q(l);
      for (std::string name; std::getline(q, name, ',');) may |= name == t.qos;
    }
    if (!may) {
      std::fprintf(stderr,
                   "planc-conf: %s:%zu: pool '%s': account %s (user %s) may not use %s (%s), the "
                   "pool's tier: its QOS are %s (sacctmgr modify user %s account=%s set "
                   "qos+=%s)\n",
                   file, p.line, p.name.c_str(), p.account.c_str(), p.user.c_str(), t.qos.c_str(),
                   t.label.c_str(), lines[0].empty() ? "none" : lines[0].c_str(), p.user.c_str(),
                   p.account.c_str(), t.qos.c_str());
      ok = false;
    }
  }
  return ok;
}

std::string preempt_list(const planc::PlancConfig& cfg, const planc::Tier& t) {
  std::string out;
  for (const planc::Tier& v : cfg.tiers.all()) {
    if (!t.preempts[planc::tier_index(v.id)]) continue;
    if (!out.empty()) out += ",";
    out += v.qos;
  }
  return out;
}

std::string factor(uint32_t permille) {
  return planc::format_micros(static_cast<planc::Micros>(permille) * 1000);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") return help();
    if (a == "--version" || a == "-V") {
      std::printf("planc-conf %s\n", PACKAGE_VERSION);
      return 0;
    }
  }
  long gpus = -1;
  // --gpus N (or --gpus=N) may stand anywhere after the command.
  for (size_t i = 0; i < args.size(); ++i) {
    std::string v;
    if (args[i] == "--gpus") {
      if (i + 1 >= args.size()) return usage("--gpus needs a number (the cluster's GPUs)");
      v = args[i + 1];
      args.erase(args.begin() + i, args.begin() + i + 2);
    } else if (args[i].rfind("--gpus=", 0) == 0) {
      v = args[i].substr(7);
      args.erase(args.begin() + i);
    } else {
      continue;
    }
    char* end = nullptr;
    gpus = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || !end || *end || gpus < 0)
      return usage("--gpus '" + v + "' is not a number of GPUs (0 or more)");
    break;
  }
  for (const std::string& a : args)
    if (a.size() > 1 && a[0] == '-') return usage("unknown option '" + a + "'");
  if (args.empty()) return usage();
  const std::string cmd = args[0];
  if (cmd == "keys") {
    if (args.size() != 1) return usage("keys takes no argument");
    for (const std::string& k : planc::config_keys()) std::printf("%s\n", k.c_str());
    return 0;
  }
  if (cmd != "check" && cmd != "sacctmgr" && cmd != "get")
    return usage("unknown command '" + cmd + "'");
  if (gpus >= 0 && cmd != "sacctmgr") return usage("--gpus belongs to sacctmgr");
  std::string key;
  if (cmd == "get") {
    if (args.size() != 3) return usage("get needs FILE and KEY");
    key = args[2];
  } else if (args.size() != 2) {
    return usage(cmd + " needs exactly one FILE");
  }
  const std::string file = args[1];
  auto r = planc::load_config(file);
  if (!r.ok()) {
    std::fprintf(stderr, "planc-conf: %s\n", r.error().c_str());
    return 1;
  }
  const planc::PlancConfig& cfg = r.value();
  // Departures from the policy are allowed, and named (stderr: stdout may
  // be piped into sacctmgr).
  if (cmd != "get")
    for (const std::string& w : planc::policy_warnings(cfg))
      std::fprintf(stderr, "planc-conf: warning: %s: %s\n", file.c_str(), w.c_str());
  if (cmd == "get") {
    if (planc::iequals(key, "GuaranteedPartition")) {
      std::printf("%s\n", cfg.guaranteed_partition.c_str());
    } else if (planc::iequals(key, "GuaranteedCapQOS")) {
      std::printf("%s\n", cfg.guaranteed_cap_qos.c_str());
    } else if (planc::iequals(key, "SpoolDir")) {
      // Empty: the default, <StateSaveLocation>/planc_jobcomp.
      std::printf("%s\n", cfg.spool_dir.c_str());
    } else {
      std::fprintf(stderr, "planc-conf: get: unknown key '%s'\n", key.c_str());
      return 2;
    }
    return 0;
  }
  if (cmd == "check") {
    if (!check_pools(file.c_str(), cfg)) return 1;
    std::printf("%s: OK\n", file.c_str());
    std::printf("%-4s %-16s %-9s %-5s %-11s %-6s %-9s %s\n", "TIER", "QOS", "PRIORITY", "GRACE",
                "PREEMPTIBLE", "PRICE", "PREEMPTS", "ALIASES");
    for (const planc::Tier& t : cfg.tiers.all()) {
      std::string aliases;
      for (const auto& a : t.aliases) aliases += (aliases.empty() ? "" : ",") + a;
      std::string pl = preempt_list(cfg, t);
      std::printf("%-4s %-16s %-9u %-5u %-11s %-6s %-9s %s\n", t.label.c_str(), t.qos.c_str(),
                  t.priority, t.grace_seconds, t.preemptible ? "yes" : "no",
                  factor(t.price_permille).c_str(), pl.empty() ? "-" : pl.c_str(), aliases.c_str());
    }
    auto tier_or_none = [&](const std::optional<planc::TierId>& t) {
      return t ? cfg.tiers.tier(*t).label : std::string("none");
    };
    std::printf("%-4s %-11s %-11s %-10s %-11s %s\n", "TIER", "VICTIMCLASS", "ALTERNATIVE",
                "STARVEINTO", "STARVEAFTER", "PRICERANGE");
    for (const planc::Tier& t : cfg.tiers.all()) {
      std::string after = !t.starves_into ? "-"
                          : t.starve_after_seconds
                              ? std::to_string(t.starve_after_seconds) + "s"
                              : std::to_string(cfg.starvation_threshold_seconds) + "s";
      std::string range = planc::permille_text(t.price_min_permille) + "-" +
                          planc::permille_text(t.price_max_permille);
      std::printf("%-4s %-11u %-11s %-10s %-11s %s\n", t.label.c_str(), t.victim_class,
                  tier_or_none(t.alternative).c_str(), tier_or_none(t.starves_into).c_str(),
                  after.c_str(), range.c_str());
    }
    std::printf(
        "DefaultTier=%s GuaranteedCapPercent=%u GuaranteedPartition=%s "
        "GuaranteedCapQOS=%s PreemptMaxCount=%u PreemptWindow=%us GraceFinishedExitCode=%s\n",
        cfg.tiers.tier(cfg.default_tier).label.c_str(), cfg.guaranteed_cap_percent,
        cfg.guaranteed_partition.empty() ? "(none: cap not enforced)"
                                         : cfg.guaranteed_partition.c_str(),
        cfg.guaranteed_cap_qos.c_str(), cfg.preempt_max_count, cfg.preempt_window_seconds,
        cfg.grace_finished_exit_code < 0 ? "none"
                                         : std::to_string(cfg.grace_finished_exit_code).c_str());
    std::printf("P3PreemptMaxPercent=%s P3PreemptSoftPercent=%u P3PreemptWindow=%us\n",
                cfg.p3_preempt_max_percent ? std::to_string(cfg.p3_preempt_max_percent).c_str()
                                           : "0 (no budget)",
                cfg.p3_soft_percent(), cfg.p3_preempt_window_seconds);
    std::printf("StarvationThreshold=%us StarvationInterval=%us StarvationMaxPerInterval=%u\n",
                cfg.starvation_threshold_seconds, cfg.starvation_interval_seconds,
                cfg.starvation_max_per_interval);
    std::printf("SpotCapP2: %s; SpotCapP3: %s; spot day starts %s\n",
                planc::describe_spot_cap(cfg, planc::TierId::kP2).c_str(),
                planc::describe_spot_cap(cfg, planc::TierId::kP3).c_str(),
                planc::describe_spot_day(cfg).c_str());
    const planc::InfusionSettings& is = cfg.infusion.settings;
    std::printf(
        "Infusion=%s InfusionIdleP1=%s InfusionIdleP3=%s InfusionIdleMarket=%s "
        "InfusionHysteresis=%s InfusionCooldown=%us InfusionMaxPerHour=%u InfusionWindow=%us "
        "InfusionLimitWindow=%us\n",
        cfg.infusion.enabled ? "yes" : "no", planc::permille_text(is.p1_idle_permille).c_str(),
        planc::permille_text(is.p3_idle_permille).c_str(),
        planc::permille_text(is.market_idle_permille).c_str(),
        planc::permille_text(is.hysteresis_permille).c_str(), is.cooldown_seconds,
        is.max_ops_per_hour, is.window_seconds, is.limit_window_seconds);
    if (!cfg.infusion.pools.empty()) {
      std::printf("%-16s %-4s %-16s %-12s %-4s %-3s %-3s %-5s %s\n", "POOL", "TIER", "ACCOUNT",
                  "USER", "GPUS", "MIN", "MAX", "DRAIN", "SCRIPT");
      for (const planc::PoolConfig& p : cfg.infusion.pools)
        std::printf("%-16s %-4s %-16s %-12s %-4u %-3u %-3u %-5s %s\n", p.name.c_str(),
                    cfg.tiers.tier(p.tier).label.c_str(), p.account.c_str(), p.user.c_str(),
                    p.gpus_per_replica, p.min_replicas, p.max_replicas,
                    (std::to_string(p.drain_grace_seconds) + "s").c_str(), p.script.c_str());
    }
    return 0;
  }
  // Two passes: every QoS must exist before another's Preempt= can name it.
  for (const planc::Tier& t : cfg.tiers.all()) std::printf("add qos %s\n", t.qos.c_str());
  // An empty Preempt= is not printed: in 22.05 sacctmgr refuses Preempt=''
  // and slurmdbd turns an empty list into QoS id 0 (as_mysql_qos.c).  A
  // relation removed from planc.conf must be removed with Preempt-=NAME.
  for (const planc::Tier& t : cfg.tiers.all()) {
    std::string pl = preempt_list(cfg, t);
    std::printf(
        "modify qos where name=%s set Priority=%u%s%s PreemptMode=%s GraceTime=%u "
        "UsageFactor=%s\n",
        t.qos.c_str(), t.priority, pl.empty() ? "" : " Preempt=", pl.c_str(),
        t.preemptible ? "requeue" : "cluster", t.grace_seconds, factor(t.price_permille).c_str());
  }
  if (gpus >= 0 && !cfg.guaranteed_partition.empty()) {
    std::printf("add qos %s\n", cfg.guaranteed_cap_qos.c_str());
    std::printf("modify qos where name=%s set GrpTRES=gres/gpu=%u\n",
                cfg.guaranteed_cap_qos.c_str(),
                planc::guaranteed_gpu_cap(cfg, static_cast<uint32_t>(gpus)));
  }
  return 0;
}
