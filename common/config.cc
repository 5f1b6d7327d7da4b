#include "common/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/market.h"

namespace planc {

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

namespace {

std::string lower(std::string_view s) { return ascii_lower(s); }

struct Pair {
  std::string key;
  std::string value;
};

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> split_list(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string_view::npos) comma = s.size();
    std::string item = trim(s.substr(start, comma - start));
    if (!item.empty()) out.push_back(item);
    start = comma + 1;
  }
  return out;
}

// Splits one line into Key=Value pairs the way slurm.conf does: pairs are
// separated by blanks, a value in double quotes may contain blanks, '#'
// outside quotes starts a comment.  On a syntax error returns the message.
std::optional<std::string> tokenize(std::string_view line, std::vector<Pair>* out) {
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i >= line.size() || line[i] == '#') break;
    size_t eq = i;
    while (eq < line.size() && line[eq] != '=' && line[eq] != '#' &&
           !std::isspace(static_cast<unsigned char>(line[eq])))
      ++eq;
    std::string key(line.substr(i, eq - i));
    if (eq >= line.size() || line[eq] != '=') return "'" + key + "' is not of the form Key=Value";
    size_t v = eq + 1;
    std::string value;
    if (v < line.size() && line[v] == '"') {
      size_t close = line.find('"', v + 1);
      if (close == std::string_view::npos) return "key '" + key + "': unterminated quote";
      value = std::string(line.substr(v + 1, close - v - 1));
      i = close + 1;
    } else {
      size_t end = v;
      while (end < line.size() && line[end] != '#' &&
             !std::isspace(static_cast<unsigned char>(line[end])))
        ++end;
      value = std::string(line.substr(v, end - v));
      i = end;
    }
    out->push_back({key, value});
  }
  return std::nullopt;
}

class Parser {
 public:
  Parser(std::string_view filename) : filename_(filename) {}

  Result<PlancConfig> run(std::string_view text) {
    size_t lineno = 0, pos = 0;
    while (pos <= text.size()) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string_view::npos) nl = text.size();
      ++lineno;
      line_ = lineno;
      std::string_view line = text.substr(pos, nl - pos);
      pos = nl + 1;
      std::vector<Pair> pairs;
      if (auto err = tokenize(line, &pairs)) return fail(*err);
      if (pairs.empty()) continue;
      if (!seen_in_line(pairs)) return Result<PlancConfig>::failure(error_);
      bool ok = iequals(pairs[0].key, "Tier")   ? tier_line(pairs)
                : iequals(pairs[0].key, "Pool") ? pool_line(pairs)
                                                : global_line(pairs);
      if (!ok) return Result<PlancConfig>::failure(error_);
      if (nl == text.size()) break;
    }
    // Checks across lines, reported at the line that set the value last.
    if (auto problem = cfg_.tiers.validate()) {
      // Blame the tier's own line, or else the last Tier line read.
      line_ = tier_seen_[tier_index(problem->tier)];
      if (!line_) line_ = *std::max_element(tier_seen_.begin(), tier_seen_.end());
      return fail("key '" + problem->key + "': " + problem->message);
    }
    if (!check_infusion()) return Result<PlancConfig>::failure(error_);
    for (const auto& [type, price] : cfg_.prices.card_hour) {
      if (price < cfg_.prices.card_hour_floor) {
        auto cp = global_seen_.find("cardhourprice");
        auto fl = global_seen_.find("cardhourpricefloor");
        line_ = std::max(cp == global_seen_.end() ? 0 : cp->second,
                         fl == global_seen_.end() ? 0 : fl->second);
        return fail("key 'CardHourPrice': " + type + " at " + format_micros(price) +
                    " is below CardHourPriceFloor " + format_micros(cfg_.prices.card_hour_floor));
      }
    }
    return cfg_;
  }

 private:
  Result<PlancConfig> fail(const std::string& msg) {
    set_error(msg);
    return Result<PlancConfig>::failure(error_);
  }
  bool set_error(const std::string& msg) {
    error_ = std::string(filename_);
    if (line_) error_ += ":" + std::to_string(line_);
    error_ += ": " + msg;
    return false;
  }
  bool bad(const Pair& p, const std::string& msg) {
    return set_error("key '" + p.key + "': " + msg);
  }

  bool seen_in_line(const std::vector<Pair>& pairs) {
    for (size_t i = 0; i < pairs.size(); ++i)
      for (size_t j = i + 1; j < pairs.size(); ++j)
        if (iequals(pairs[i].key, pairs[j].key)) return bad(pairs[j], "given twice on one line");
    return true;
  }

  bool uint_value(const Pair& p, uint64_t lo, uint64_t hi, uint32_t* out) {
    const std::string& v = p.value;
    if (v.empty() || v.size() > 10 || v.find_first_not_of("0123456789") != std::string::npos)
      return bad(p, "'" + v + "' is not a whole number (expected " + std::to_string(lo) + " to " +
                        std::to_string(hi) + ")");
    uint64_t n = std::strtoull(v.c_str(), nullptr, 10);
    if (n < lo || n > hi)
      return bad(p, v + " is out of range (expected " + std::to_string(lo) + " to " +
                        std::to_string(hi) + ")");
    *out = static_cast<uint32_t>(n);
    return true;
  }

  bool duration_value(const Pair& p, uint32_t lo, uint32_t hi, uint32_t* out) {
    auto d = parse_duration(p.value);
    if (!d)
      return bad(p, "'" + p.value +
                        "' is not a duration (use seconds, or a number with s, min, h or d: "
                        "30, 30s, 5min, 24h, 1d)");
    if (*d < lo || *d > hi)
      return bad(p, p.value + " is out of range (expected " + std::to_string(lo) + " to " +
                        std::to_string(hi) + " seconds)");
    *out = *d;
    return true;
  }

  bool price_value(const Pair& p, Micros* out) {
    auto m = parse_decimal_micros(p.value);
    if (!m)
      return bad(p, "'" + p.value +
                        "' is not a price (a decimal number such as 20 or 0.05, at most 6 "
                        "decimals, no currency sign)");
    *out = *m;
    return true;
  }

  // A Slurm partition or QoS name: letters, digits, '-', '_', '.'.
  bool name_value(const Pair& p, std::string* out, bool may_be_empty) {
    if ((p.value.empty() && !may_be_empty) ||
        p.value.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                  "0123456789-_.") != std::string::npos)
      return bad(p, "'" + p.value + "' is not a valid name (letters, digits, - _ .)");
    *out = p.value;
    return true;
  }

  bool bool_value(const Pair& p, bool* out) {
    std::string v = lower(p.value);
    if (v == "yes" || v == "true" || v == "1")
      *out = true;
    else if (v == "no" || v == "false" || v == "0")
      *out = false;
    else
      return bad(p, "'" + p.value + "' is not yes or no");
    return true;
  }

  // One table drives the parser and the valid-keys message.
  using Setter = bool (Parser::*)(const Pair&);
  struct Key {
    const char* name;
    Setter set;
  };

  bool global_line(const std::vector<Pair>& pairs) {
    for (const Pair& p : pairs) {
      if (!first_time(p)) return false;
      const Key* key = find_key(kGlobalKeys, p.key);
      if (!key)
        return bad(p, "unknown key (valid keys: " + key_names(kGlobalKeys) +
                          "; and Tier lines with " + key_names(kTierKeys) +
                          "; and Pool lines with " + key_names(kPoolKeys) + ")");
      if (!(this->*key->set)(p)) return false;
    }
    return true;
  }

  template <size_t N>
  static const Key* find_key(const Key (&keys)[N], std::string_view name) {
    for (const Key& k : keys)
      if (iequals(k.name, name)) return &k;
    return nullptr;
  }
  template <size_t N>
  static std::string key_names(const Key (&keys)[N]) {
    std::string out;
    for (const Key& k : keys) out += (out.empty() ? "" : ", ") + std::string(k.name);
    return out;
  }

  bool set_default_tier(const Pair& p) {
    const Tier* t = cfg_.tiers.find(p.value);
    if (!t) return bad(p, "unknown tier '" + p.value + "' (use P0, P1, P2 or P3)");
    cfg_.default_tier = t->id;
    return true;
  }
  bool set_cap_percent(const Pair& p) {
    return uint_value(p, 1, 100, &cfg_.guaranteed_cap_percent);
  }
  bool set_guaranteed_partition(const Pair& p) {
    return name_value(p, &cfg_.guaranteed_partition, true);
  }
  bool set_cap_qos(const Pair& p) {
    if (!name_value(p, &cfg_.guaranteed_cap_qos, false)) return false;
    cfg_.guaranteed_cap_qos = lower(cfg_.guaranteed_cap_qos);
    return true;
  }
  bool set_max_count(const Pair& p) { return uint_value(p, 1, 1000, &cfg_.preempt_max_count); }
  bool set_window(const Pair& p) {
    return duration_value(p, 1, 366 * 86400, &cfg_.preempt_window_seconds);
  }
  bool set_p3_budget(const Pair& p) { return uint_value(p, 0, 100, &cfg_.p3_preempt_max_percent); }
  bool set_p3_soft(const Pair& p) { return uint_value(p, 0, 100, &cfg_.p3_preempt_soft_percent); }
  bool set_pack_guaranteed(const Pair& p) { return bool_value(p, &cfg_.pack_guaranteed); }
  bool set_spare_p3(const Pair& p) { return bool_value(p, &cfg_.whole_node_spare_p3); }
  bool set_p3_budget_window(const Pair& p) {
    return duration_value(p, 1, 7 * 86400, &cfg_.p3_preempt_window_seconds);
  }
  bool set_finished_code(const Pair& p) {
    if (iequals(p.value, "none")) {
      cfg_.grace_finished_exit_code = -1;
      return true;
    }
    uint32_t code = 0;
    if (!uint_value(p, 1, 255, &code)) return false;
    cfg_.grace_finished_exit_code = static_cast<int32_t>(code);
    return true;
  }
  bool set_starvation_threshold(const Pair& p) {
    return duration_value(p, 1, 366 * 86400, &cfg_.starvation_threshold_seconds);
  }
  bool set_starvation_interval(const Pair& p) {
    return duration_value(p, 1, 86400, &cfg_.starvation_interval_seconds);
  }
  bool set_sla_start(const Pair& p) { return duration_value(p, 1, 86400, &cfg_.sla_start_seconds); }
  bool set_starvation_max(const Pair& p) {
    return uint_value(p, 1, 100000, &cfg_.starvation_max_per_interval);
  }
  bool set_starvation_share(const Pair& p) {
    return uint_value(p, 1, 100, &cfg_.starvation_max_share_percent);
  }
  bool set_spot_cap_p2(const Pair& p) { return spot_cap(p, TierId::kP2); }
  bool set_spot_cap_p3(const Pair& p) { return spot_cap(p, TierId::kP3); }
  bool set_spot_reset(const Pair& p) {
    auto t = parse_time_of_day(p.value);
    if (!t) return bad(p, "'" + p.value + "' is not a time of day (HH:MM, e.g. 00:00 or 04:30)");
    cfg_.spot_reset_seconds = *t;
    return true;
  }
  bool set_spot_zone(const Pair& p) {
    auto z = parse_utc_offset(p.value);
    if (!z)
      return bad(p, "'" + p.value +
                        "' is not a UTC offset (e.g. UTC, UTC+8, +08:00, -05:30; zones with "
                        "daylight saving time are not supported)");
    cfg_.spot_utc_offset_seconds = *z;
    return true;
  }
  bool set_spot_day(const Pair& p) { return duration_value(p, 10, 86400, &cfg_.spot_day_seconds); }
  bool set_currency(const Pair& p) {
    if (p.value.empty() || p.value.size() > 8 ||
        p.value.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ") != std::string::npos)
      return bad(p, "'" + p.value + "' is not a currency code (e.g. CNY, USD)");
    cfg_.prices.currency = p.value;
    return true;
  }
  bool set_card_prices(const Pair& p) { return card_prices(p); }
  bool set_default_card_price(const Pair& p) {
    return price_value(p, &cfg_.prices.default_card_hour);
  }
  bool set_card_floor(const Pair& p) { return price_value(p, &cfg_.prices.card_hour_floor); }
  bool set_core_price(const Pair& p) { return price_value(p, &cfg_.prices.core_hour); }
  bool set_mem_price(const Pair& p) { return price_value(p, &cfg_.prices.mem_gib_hour); }
  bool set_card_weight(const Pair& p) {
    return type_map(p, "WEIGHT", "1g.10gb:0.142857", kMicrosPerUnit, &cfg_.prices.card_weight);
  }
  bool set_mps(const Pair& p) { return uint_value(p, 1, 1000000, &cfg_.prices.mps_per_card); }
  bool set_spool_dir(const Pair& p) {
    if (!p.value.empty() && p.value[0] != '/')
      return bad(p, "'" + p.value +
                        "' is not an absolute path (e.g. /var/spool/planc; leave it empty for "
                        "StateSaveLocation/planc_jobcomp)");
    cfg_.spool_dir = p.value;
    while (cfg_.spool_dir.size() > 1 && cfg_.spool_dir.back() == '/') cfg_.spool_dir.pop_back();
    return true;
  }
  bool set_market(const Pair& p) { return bool_value(p, &cfg_.market.enabled); }
  bool set_market_interval(const Pair& p) {
    return duration_value(p, 1, 86400, &cfg_.market.interval_seconds);
  }
  bool set_market_reserve(const Pair& p) {
    return duration_value(p, 0, 7 * 86400, &cfg_.market.reserve_after_seconds);
  }
  bool set_market_min(const Pair& p) {
    auto m = parse_decimal_micros(p.value);
    if (!m || *m <= 0 || *m > kMicrosPerUnit)
      return bad(p, "'" + p.value +
                        "' is not a share of the list price above 0 and at most 1 (e.g. 0.30)");
    cfg_.market.min_permille = static_cast<uint32_t>(*m / 1000);
    return true;
  }
  bool set_market_curve(const Pair& p) {
    std::string why;
    auto c = parse_floor_curve(p.value, &why);
    if (!c) return bad(p, why);
    cfg_.market.floor_curve = std::move(*c);
    return true;
  }
  bool set_shards(const Pair& p) { return uint_value(p, 1, 1000000, &cfg_.prices.shards_per_card); }

  // --- capacity infusion -------------------------------------------------------
  bool set_infusion(const Pair& p) { return bool_value(p, &cfg_.infusion.enabled); }
  // An idle share: 0 < share < 1, e.g. 0.05 (kept in per mille).
  bool share_value(const Pair& p, uint32_t* out) {
    auto m = parse_decimal_micros(p.value);
    if (!m || *m <= 0 || *m >= kMicrosPerUnit || *m % 1000)
      return bad(p, "'" + p.value +
                        "' is not a share of the GPUs above 0 and below 1, in steps of 0.001 "
                        "(e.g. 0.05 for 5%)");
    *out = static_cast<uint32_t>(*m / 1000);
    return true;
  }
  bool set_idle_p1(const Pair& p) {
    return share_value(p, &cfg_.infusion.settings.p1_idle_permille);
  }
  bool set_idle_p3(const Pair& p) {
    return share_value(p, &cfg_.infusion.settings.p3_idle_permille);
  }
  bool set_idle_market(const Pair& p) {
    return share_value(p, &cfg_.infusion.settings.market_idle_permille);
  }
  bool set_hysteresis(const Pair& p) {
    return share_value(p, &cfg_.infusion.settings.hysteresis_permille);
  }
  bool set_cooldown(const Pair& p) {
    return duration_value(p, 1, 86400, &cfg_.infusion.settings.cooldown_seconds);
  }
  bool set_max_per_hour(const Pair& p) {
    return uint_value(p, 1, 3600, &cfg_.infusion.settings.max_ops_per_hour);
  }
  bool set_infusion_window(const Pair& p) {
    return duration_value(p, 1, 3600, &cfg_.infusion.settings.window_seconds);
  }
  bool set_infusion_limit_window(const Pair& p) {
    return duration_value(p, 1, 86400, &cfg_.infusion.settings.limit_window_seconds);
  }

  bool pool_line(const std::vector<Pair>& pairs) {
    PoolConfig pool;
    pool.line = line_;
    if (!name_value(pairs[0], &pool.name, false)) return false;
    for (const PoolConfig& other : cfg_.infusion.pools)
      if (iequals(other.name, pool.name))
        return bad(pairs[0], "pool '" + pool.name + "' is described twice (first on line " +
                                 std::to_string(other.line) + ")");
    pool_ = &pool;
    for (size_t i = 1; i < pairs.size(); ++i) {
      const Pair& p = pairs[i];
      const Key* key = find_key(kPoolKeys, p.key);
      if (!key) return bad(p, "unknown key on a Pool line (valid: " + key_names(kPoolKeys) + ")");
      if (!(this->*key->set)(p)) return false;
    }
    pool_ = nullptr;
    for (const char* required : {"Tier", "Account", "User", "Script"}) {
      bool found = false;
      for (size_t i = 1; i < pairs.size(); ++i) found |= iequals(pairs[i].key, required);
      if (!found)
        return bad(pairs[0], "pool '" + pool.name + "' has no " + required +
                                 "= (a Pool line needs Tier, Account, User and Script)");
    }
    if (pool.min_replicas > pool.max_replicas)
      return bad(pairs[0], "pool '" + pool.name + "': MinReplicas " +
                               std::to_string(pool.min_replicas) + " is above MaxReplicas " +
                               std::to_string(pool.max_replicas));
    cfg_.infusion.pools.push_back(std::move(pool));
    return true;
  }
  bool set_pool_tier(const Pair& p) {
    auto id = parse_tier_label(p.value);
    if (!id || (*id != TierId::kP1 && *id != TierId::kP3))
      return bad(p, "'" + p.value +
                        "' is not a serving pool's tier (use P1, the guaranteed API pool, or P3, "
                        "the spot API pool)");
    pool_->tier = *id;
    return true;
  }
  bool set_pool_account(const Pair& p) { return name_value(p, &pool_->account, false); }
  bool set_pool_user(const Pair& p) {
    if (!name_value(p, &pool_->user, false)) return false;
    if (pool_->user == "root" || pool_->user == "0")
      return bad(p,
                 "a pool's replicas may not run as root: give the platform's own user, e.g. "
                 "User=maas (useradd --system maas)");
    return true;
  }
  // An absolute path; else "'<value>' is not an absolute path (<what>)".
  bool absolute_path_value(const Pair& p, const char* what, std::string* out) {
    if (p.value.empty() || p.value[0] != '/')
      return bad(p, "'" + p.value + "' is not an absolute path (" + what + ")");
    *out = p.value;
    return true;
  }
  bool set_pool_script(const Pair& p) {
    return absolute_path_value(
        p, "the batch script that starts one replica, e.g. /etc/slurm/planc-pools/serve.sh",
        &pool_->script);
  }
  bool set_pool_gpus(const Pair& p) { return uint_value(p, 1, 1024, &pool_->gpus_per_replica); }
  bool set_pool_min(const Pair& p) { return uint_value(p, 0, 10000, &pool_->min_replicas); }
  bool set_pool_max(const Pair& p) { return uint_value(p, 1, 10000, &pool_->max_replicas); }
  bool set_pool_drain(const Pair& p) {
    return duration_value(p, 0, 3600, &pool_->drain_grace_seconds);
  }
  bool set_pool_output(const Pair& p) {
    return absolute_path_value(p,
                               "where a replica's output goes, sbatch -o's patterns allowed, e.g. "
                               "/var/log/planc-pools/%x-%j.out, or /dev/null",
                               &pool_->output);
  }

  // Across lines: the thresholds rise P1 < P3 < market, and the hysteresis
  // is below the lowest (else a pool that grew would shrink at once).
  bool check_infusion() {
    const InfusionSettings& s = cfg_.infusion.settings;
    // Blame the key's line when planc.conf set it, else the file.
    auto fail_at = [&](const char* key, const std::string& msg) {
      auto it = global_seen_.find(lower(key));
      line_ = it == global_seen_.end() ? 0 : it->second;
      return set_error("key '" + std::string(key) + "': " + msg);
    };
    const std::string rise = "the infusion thresholds must rise, InfusionIdleP1 (" +
                             permille_text(s.p1_idle_permille) + ") < InfusionIdleP3 (" +
                             permille_text(s.p3_idle_permille) + ") < InfusionIdleMarket (" +
                             permille_text(s.market_idle_permille) + ")";
    if (s.p1_idle_permille >= s.p3_idle_permille) return fail_at("InfusionIdleP3", rise);
    if (s.p3_idle_permille >= s.market_idle_permille) return fail_at("InfusionIdleMarket", rise);
    if (s.hysteresis_permille >= s.p1_idle_permille)
      return fail_at("InfusionHysteresis", permille_text(s.hysteresis_permille) +
                                               " must be below InfusionIdleP1 (" +
                                               permille_text(s.p1_idle_permille) +
                                               "): a pool that grew would shrink at once");
    // A P1 replica is given back to P0/P1 work, which must start within
    // SlaStartSeconds of its submission: the drain grace, the kill, the
    // node's cleanup and a scheduling pass must all fit.
    const uint32_t sla = cfg_.sla_start_seconds;
    const uint32_t most = sla > kReclaimMarginSeconds ? sla - kReclaimMarginSeconds : 0;
    for (const PoolConfig& pool : cfg_.infusion.pools)
      if (pool.tier == TierId::kP1 && pool.drain_grace_seconds > most) {
        line_ = pool.line;
        return set_error("key 'DrainGrace': pool '" + pool.name + "' drains its replicas for " +
                         std::to_string(pool.drain_grace_seconds) +
                         " s, but a P1 replica is given back to guaranteed work that must start "
                         "within " +
                         std::to_string(sla) + " s (SlaStartSeconds): at most " +
                         std::to_string(most) + " s");
      }
    return true;
  }

  // Card-hours per account per day, or "unlimited".
  bool spot_cap(const Pair& p, TierId tier) {
    uint64_t& cap = cfg_.spot_cap_card_seconds[tier_index(tier)];
    if (iequals(p.value, "unlimited")) {
      cap = kUnlimited;
      return true;
    }
    auto m = parse_decimal_micros(p.value);
    if (!m)
      return bad(
          p, "'" + p.value + "' is not a number of card-hours (e.g. 100 or 0.5) or 'unlimited'");
    cap = static_cast<uint64_t>(*m) * 3600 / kMicrosPerUnit;
    return true;
  }

  bool card_prices(const Pair& p) {
    return type_map(p, "PRICE", "h800:20.00", 0, &cfg_.prices.card_hour);
  }

  // TYPE:VALUE[,TYPE:VALUE...] with decimal values; max 0 means no upper
  // bound, else values must be above 0 and at most max.
  bool type_map(const Pair& p, const std::string& what, const std::string& example, Micros max,
                std::map<std::string, Micros>* out) {
    std::map<std::string, Micros> values;
    auto items = split_list(p.value);
    if (items.empty())
      return bad(p, "expected TYPE:" + what + "[,TYPE:" + what + "...], e.g. " + example);
    for (const std::string& item : items) {
      size_t colon = item.find(':');
      if (colon == std::string::npos || colon == 0)
        return bad(p, "'" + item + "' is not TYPE:" + what + " (e.g. " + example + ")");
      auto m = parse_decimal_micros(item.substr(colon + 1));
      if (!m || (max && (*m == 0 || *m > max)))
        return bad(p, "'" + item.substr(colon + 1) + "' in '" + item + "' is not a " +
                          (max ? "valid " : "") + lower(what) +
                          (max ? " (above 0, at most " + format_micros(max) + ")" : ""));
      values[lower(item.substr(0, colon))] = *m;
    }
    *out = std::move(values);
    return true;
  }

  bool tier_line(const std::vector<Pair>& pairs) {
    auto id = parse_tier_label(pairs[0].value);
    if (!id) return bad(pairs[0], "'" + pairs[0].value + "' is not a tier (use P0, P1, P2 or P3)");
    if (tier_seen_[tier_index(*id)])
      return bad(pairs[0], pairs[0].value + " is described twice (first on line " +
                               std::to_string(tier_seen_[tier_index(*id)]) + ")");
    tier_seen_[tier_index(*id)] = line_;
    tier_ = &cfg_.tiers.mutable_tier(*id);
    const Pair* factor = nullptr;
    for (size_t i = 1; i < pairs.size(); ++i) {
      const Pair& p = pairs[i];
      const Key* key = find_key(kTierKeys, p.key);
      if (!key) return bad(p, "unknown key on a Tier line (valid: " + key_names(kTierKeys) + ")");
      if (!(this->*key->set)(p)) return false;
      if (iequals(p.key, "PriceFactor")) factor = &p;
    }
    // A factor is checked against the range once both are read (either
    // may come first on the line).
    const Tier& t = *tier_;
    if (t.price_permille < t.price_min_permille || t.price_permille > t.price_max_permille) {
      if (factor)
        return bad(*factor, factor->value + " is outside the policy's range for " + t.label + " (" +
                                format_micros(t.price_min_permille * 1000) + " to " +
                                format_micros(t.price_max_permille * 1000) + ")");
      const Pair* range = nullptr;
      for (const Pair& p : pairs)
        if (iequals(p.key, "PriceRange")) range = &p;
      if (range)
        return bad(*range, t.label + "'s PriceFactor " + permille_text(t.price_permille) +
                               " is outside " + range->value);
    }
    return true;
  }

  bool set_qos(const Pair& p) {
    if (p.value.empty() || p.value.find_first_of(", \t") != std::string::npos)
      return bad(p, "'" + p.value + "' is not a QoS name");
    tier_->qos = lower(p.value);  // sacctmgr stores QoS names in lower case
    return true;
  }
  bool set_product(const Pair& p) {
    tier_->product = p.value;
    return true;
  }
  bool set_aliases(const Pair& p) {
    tier_->aliases = split_list(p.value);
    return true;
  }
  bool set_priority(const Pair& p) { return uint_value(p, 0, 2147483647u, &tier_->priority); }
  bool set_preemptible(const Pair& p) { return bool_value(p, &tier_->preemptible); }
  bool set_grace(const Pair& p) { return duration_value(p, 0, 3600, &tier_->grace_seconds); }
  bool set_factor(const Pair& p) { return price_factor(p, tier_); }
  bool set_preempts(const Pair& p) {
    tier_->preempts = {};
    if (iequals(p.value, "none")) return true;
    auto items = split_list(p.value);
    if (items.empty()) return bad(p, "expected a list of tiers (e.g. P2,P3) or none");
    for (const std::string& item : items) {
      auto victim = parse_tier_label(item);
      if (!victim) return bad(p, "'" + item + "' is not a tier (use P0, P1, P2 or P3)");
      tier_->preempts[tier_index(*victim)] = true;
    }
    return true;
  }
  bool set_victim_class(const Pair& p) {
    uint32_t c = 0;
    if (!uint_value(p, 1, 3, &c)) return false;
    tier_->victim_class = static_cast<uint8_t>(c);
    return true;
  }
  // A tier label or none.
  bool tier_or_none(const Pair& p, std::optional<TierId>* out) {
    if (iequals(p.value, "none")) {
      out->reset();
      return true;
    }
    auto t = parse_tier_label(p.value);
    if (!t) return bad(p, "'" + p.value + "' is not a tier (use P0, P1, P2, P3 or none)");
    *out = *t;
    return true;
  }
  bool set_alternative(const Pair& p) { return tier_or_none(p, &tier_->alternative); }
  bool set_starve_into(const Pair& p) { return tier_or_none(p, &tier_->starves_into); }
  bool set_starve_after(const Pair& p) {
    return duration_value(p, 1, 366 * 86400, &tier_->starve_after_seconds);
  }
  bool set_price_range(const Pair& p) {
    size_t dash = p.value.find('-');
    auto factor = [](std::string_view v) -> std::optional<uint32_t> {
      auto m = parse_decimal_micros(v);
      if (!m || *m % 1000 != 0 || *m > 1000 * kMicrosPerUnit) return std::nullopt;
      return static_cast<uint32_t>(*m / 1000);
    };
    std::optional<uint32_t> lo, hi;
    if (dash != std::string::npos) {
      lo = factor(std::string_view(p.value).substr(0, dash));
      hi = factor(std::string_view(p.value).substr(dash + 1));
    }
    if (!lo || !hi || *lo > *hi)
      return bad(p, "'" + p.value + "' is not a range of factors LOW-HIGH (e.g. 0.30-0.40)");
    tier_->price_min_permille = *lo;
    tier_->price_max_permille = *hi;
    return true;
  }

  // A factor with at most 3 decimals; its tier's PriceRange (the policy's
  // by default: P2 30-40% of list, P3 30-50%, guaranteed tiers list or
  // above) is checked at the end of the line.
  bool price_factor(const Pair& p, Tier* t) {
    auto m = parse_decimal_micros(p.value);
    if (!m || *m % 1000 != 0)
      return bad(p, "'" + p.value + "' is not a factor with at most 3 decimals (e.g. 0.35)");
    t->price_permille = static_cast<uint32_t>(*m / 1000);
    return true;
  }

  bool first_time(const Pair& p) {
    std::string k = lower(p.key);
    auto it = global_seen_.find(k);
    if (it != global_seen_.end())
      return bad(p, "given twice (first on line " + std::to_string(it->second) + ")");
    global_seen_[k] = line_;
    return true;
  }

  static constexpr Key kGlobalKeys[] = {
      {"DefaultTier", &Parser::set_default_tier},
      {"GuaranteedCapPercent", &Parser::set_cap_percent},
      {"GuaranteedPartition", &Parser::set_guaranteed_partition},
      {"GuaranteedCapQOS", &Parser::set_cap_qos},
      {"PreemptMaxCount", &Parser::set_max_count},
      {"PreemptWindow", &Parser::set_window},
      {"P3PreemptMaxPercent", &Parser::set_p3_budget},
      {"P3PreemptWindow", &Parser::set_p3_budget_window},
      {"P3PreemptSoftPercent", &Parser::set_p3_soft},
      {"PackGuaranteed", &Parser::set_pack_guaranteed},
      {"WholeNodeSpareP3", &Parser::set_spare_p3},
      {"GraceFinishedExitCode", &Parser::set_finished_code},
      {"StarvationThreshold", &Parser::set_starvation_threshold},
      {"StarvationInterval", &Parser::set_starvation_interval},
      {"StarvationMaxPerInterval", &Parser::set_starvation_max},
      {"StarvationMaxPercent", &Parser::set_starvation_share},
      {"SlaStartSeconds", &Parser::set_sla_start},
      {"SpotCapP2", &Parser::set_spot_cap_p2},
      {"SpotCapP3", &Parser::set_spot_cap_p3},
      {"SpotCapResetTime", &Parser::set_spot_reset},
      {"SpotCapTimeZone", &Parser::set_spot_zone},
      {"SpotCapDayLength", &Parser::set_spot_day},
      {"Currency", &Parser::set_currency},
      {"CardHourPrice", &Parser::set_card_prices},
      {"DefaultCardHourPrice", &Parser::set_default_card_price},
      {"CardHourPriceFloor", &Parser::set_card_floor},
      {"CoreHourPrice", &Parser::set_core_price},
      {"MemGiBHourPrice", &Parser::set_mem_price},
      {"CardWeight", &Parser::set_card_weight},
      {"MpsPerCard", &Parser::set_mps},
      {"ShardsPerCard", &Parser::set_shards},
      {"SpoolDir", &Parser::set_spool_dir},
      {"Market", &Parser::set_market},
      {"MarketInterval", &Parser::set_market_interval},
      {"MarketMinFraction", &Parser::set_market_min},
      {"MarketFloorCurve", &Parser::set_market_curve},
      {"MarketReserveAfter", &Parser::set_market_reserve},
      {"Infusion", &Parser::set_infusion},
      {"InfusionIdleP1", &Parser::set_idle_p1},
      {"InfusionIdleP3", &Parser::set_idle_p3},
      {"InfusionIdleMarket", &Parser::set_idle_market},
      {"InfusionHysteresis", &Parser::set_hysteresis},
      {"InfusionCooldown", &Parser::set_cooldown},
      {"InfusionMaxPerHour", &Parser::set_max_per_hour},
      {"InfusionWindow", &Parser::set_infusion_window},
      {"InfusionLimitWindow", &Parser::set_infusion_limit_window},
  };
  static constexpr Key kPoolKeys[] = {
      {"Tier", &Parser::set_pool_tier},           {"Account", &Parser::set_pool_account},
      {"User", &Parser::set_pool_user},           {"Script", &Parser::set_pool_script},
      {"GpusPerReplica", &Parser::set_pool_gpus}, {"MinReplicas", &Parser::set_pool_min},
      {"MaxReplicas", &Parser::set_pool_max},     {"DrainGrace", &Parser::set_pool_drain},
      {"Output", &Parser::set_pool_output},
  };
  static constexpr Key kTierKeys[] = {
      {"QOS", &Parser::set_qos},
      {"Product", &Parser::set_product},
      {"Aliases", &Parser::set_aliases},
      {"Priority", &Parser::set_priority},
      {"Preemptible", &Parser::set_preemptible},
      {"Preempts", &Parser::set_preempts},
      {"GraceTime", &Parser::set_grace},
      {"PriceFactor", &Parser::set_factor},
      {"PriceRange", &Parser::set_price_range},
      {"VictimClass", &Parser::set_victim_class},
      {"Alternative", &Parser::set_alternative},
      {"StarveInto", &Parser::set_starve_into},
      {"StarveAfter", &Parser::set_starve_after},
  };

  friend std::vector<std::string> planc::config_keys();

  std::string_view filename_;
  size_t line_ = 0;
  std::string error_;
  PlancConfig cfg_;
  std::map<std::string, size_t> global_seen_;
  Tier* tier_ = nullptr;        // the Tier line being read
  PoolConfig* pool_ = nullptr;  // the Pool line being read
  std::array<size_t, kTierCount> tier_seen_{};
};

}  // namespace

std::optional<Micros> parse_decimal_micros(std::string_view s) {
  if (s.empty() || s.size() > 24) return std::nullopt;
  Micros whole = 0, frac = 0;
  size_t i = 0;
  int digits = 0;
  for (; i < s.size() && s[i] != '.'; ++i, ++digits) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return std::nullopt;
    whole = whole * 10 + (s[i] - '0');
    if (whole > 1000000000000LL) return std::nullopt;  // 1e12 units: absurd
  }
  if (digits == 0) return std::nullopt;
  int decimals = 0;
  if (i < s.size()) {
    ++i;  // '.'
    if (i == s.size()) return std::nullopt;
    for (; i < s.size(); ++i, ++decimals) {
      if (!std::isdigit(static_cast<unsigned char>(s[i])) || decimals >= 6) return std::nullopt;
      frac = frac * 10 + (s[i] - '0');
    }
  }
  for (; decimals < 6; ++decimals) frac *= 10;
  return whole * kMicrosPerUnit + frac;
}

std::optional<uint32_t> parse_time_of_day(std::string_view s) {
  // HH:MM or HH:MM:SS, two digits each.
  if (s.size() != 5 && s.size() != 8) return std::nullopt;
  uint32_t parts[3] = {0, 0, 0};
  for (size_t i = 0, n = 0; i < s.size(); i += 3, ++n) {
    if (!std::isdigit(static_cast<unsigned char>(s[i])) ||
        !std::isdigit(static_cast<unsigned char>(s[i + 1])) ||
        (i + 2 < s.size() && s[i + 2] != ':'))
      return std::nullopt;
    parts[n] = static_cast<uint32_t>((s[i] - '0') * 10 + (s[i + 1] - '0'));
  }
  if (parts[0] > 23 || parts[1] > 59 || parts[2] > 59) return std::nullopt;
  return parts[0] * 3600 + parts[1] * 60 + parts[2];
}

std::optional<int32_t> parse_utc_offset(std::string_view s) {
  std::string v = lower(s);
  if (v.rfind("utc", 0) == 0) v = v.substr(3);
  if (v.empty()) return 0;
  if (v[0] != '+' && v[0] != '-') return std::nullopt;
  int sign = v[0] == '-' ? -1 : 1;
  std::string_view rest = std::string_view(v).substr(1);
  uint32_t h = 0, m = 0;
  size_t colon = rest.find(':');
  std::string_view hs = rest.substr(0, colon);
  if (hs.empty() || hs.size() > 2 || hs.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  h = static_cast<uint32_t>(std::stoul(std::string(hs)));
  if (colon != std::string_view::npos) {
    std::string_view ms = rest.substr(colon + 1);
    if (ms.size() != 2 || ms.find_first_not_of("0123456789") != std::string_view::npos)
      return std::nullopt;
    m = static_cast<uint32_t>(std::stoul(std::string(ms)));
  }
  if (h > 14 || m > 59) return std::nullopt;
  return sign * static_cast<int32_t>(h * 3600 + m * 60);
}

std::optional<uint32_t> parse_duration(std::string_view s) {
  size_t i = 0;
  uint64_t n = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    n = n * 10 + static_cast<uint64_t>(s[i] - '0');
    if (n > 0xffffffffULL) return std::nullopt;
    ++i;
  }
  if (i == 0) return std::nullopt;
  std::string unit = lower(s.substr(i));
  uint64_t mult;
  if (unit.empty() || unit == "s" || unit == "sec")
    mult = 1;
  else if (unit == "m" || unit == "min")
    mult = 60;
  else if (unit == "h")
    mult = 3600;
  else if (unit == "d")
    mult = 86400;
  else
    return std::nullopt;
  if (n * mult > 0xffffffffULL) return std::nullopt;
  return static_cast<uint32_t>(n * mult);
}

std::string format_micros(Micros m) {
  bool neg = m < 0;
  if (neg) m = -m;
  std::string frac = std::to_string(m % kMicrosPerUnit);
  frac.insert(0, 6 - frac.size(), '0');
  while (frac.size() > 2 && frac.back() == '0') frac.pop_back();
  return (neg ? "-" : "") + std::to_string(m / kMicrosPerUnit) + "." + frac;
}

std::vector<std::string> policy_warnings(const PlancConfig& cfg) {
  std::vector<std::string> out;
  auto warn = [&](const std::string& what, const char* invariant) {
    out.push_back(what + ": breaks the policy's invariant \"" + invariant + "\"");
  };
  const TierTable& tt = cfg.tiers;
  auto name = [](const Tier& t) { return t.label + " (" + t.qos + ")"; };
  constexpr const char* kNeverPreempted = "P0 and P1 are never preempted";
  for (TierId g : {TierId::kP0, TierId::kP1}) {
    const Tier& t = tt.tier(g);
    if (t.preemptible) warn(name(t) + " is preemptible (Preemptible=yes)", kNeverPreempted);
    for (const Tier& a : tt.all())
      if (a.preempts[tier_index(g)])
        warn(name(a) + " may preempt " + t.label + " (Preempts=)", kNeverPreempted);
  }
  const Tier &p0 = tt.tier(TierId::kP0), &p1 = tt.tier(TierId::kP1);
  if (p0.priority != p1.priority)
    warn("P0 has Priority=" + std::to_string(p0.priority) +
             " and P1 Priority=" + std::to_string(p1.priority),
         "P0 and P1 weigh the same");
  constexpr const char* kCap = "P0+P1 within GuaranteedCapPercent (at most 80% of the GPUs)";
  if (cfg.guaranteed_partition.empty())
    warn("GuaranteedPartition is not set, so nothing caps the GPUs P0 and P1 hold", kCap);
  else if (cfg.guaranteed_cap_percent > 80)
    warn("GuaranteedCapPercent=" + std::to_string(cfg.guaranteed_cap_percent) +
             " lets P0 and P1 hold more than 80% of the GPUs",
         kCap);
  for (const Tier& t : tt.all())
    if (t.alternative && tt.tier(*t.alternative).preemptible)
      out.push_back(t.label + "'s Alternative " + tt.tier(*t.alternative).label +
                    " is preemptible: its jobs are advised another guaranteed tier instead");
  for (TierId s : {TierId::kP2, TierId::kP3})
    if (!tt.tier(s).preemptible)
      warn(name(tt.tier(s)) + " is not preemptible (Preemptible=no)", "P2 and P3 are preemptible");
  for (TierId g : {TierId::kP0, TierId::kP1})
    for (TierId s : {TierId::kP2, TierId::kP3})
      if (!tt.can_preempt(g, s))
        warn(tt.tier(g).label + " may not preempt " + tt.tier(s).label + " (Preempts=)",
             "P0 and P1 preempt P2 and P3");
  if (!tt.can_preempt(TierId::kP2, TierId::kP3))
    warn("P2 may not preempt P3 (Preempts=)", "P2 preempts P3");
  for (const Tier& v : tt.all())
    if (tt.can_preempt(TierId::kP3, v.id))
      warn("P3 may preempt " + v.label + " (Preempts=)", "P3 preempts nothing");
  return out;
}

uint32_t guaranteed_gpu_cap(const PlancConfig& cfg, uint32_t total_gpus) {
  return static_cast<uint32_t>(static_cast<uint64_t>(total_gpus) * cfg.guaranteed_cap_percent /
                               100);
}

std::vector<std::string> config_keys() {
  std::vector<std::string> out;
  for (const auto& k : Parser::kGlobalKeys) out.emplace_back(k.name);
  for (const auto& k : Parser::kTierKeys) out.push_back(std::string("Tier:") + k.name);
  for (const auto& k : Parser::kPoolKeys) out.push_back(std::string("Pool:") + k.name);
  return out;
}

Result<PlancConfig> parse_config(std::string_view text, std::string_view filename) {
  return Parser(filename).run(text);
}

Result<PlancConfig> load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    return Result<PlancConfig>::failure(
        path + ": cannot read planc.conf: " + std::strerror(err) +
        " (install it beside slurm.conf, e.g. from etc/planc.conf.example, or set PLANC_CONF)");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path);
}

std::optional<std::string> pool_user_refusal(const PoolConfig& pool, std::string_view slurm_user) {
  if (pool.user == "root" || pool.user == "0" || (!slurm_user.empty() && pool.user == slurm_user))
    return "pool '" + pool.name + "' (planc.conf line " + std::to_string(pool.line) +
           ") runs its replicas as " + pool.user +
           (pool.user == slurm_user ? std::string(", slurmctld's own SlurmUser") : std::string()) +
           ": a replica runs the pool's script with that user's rights; give the platform's own "
           "user (User=maas)";
  return std::nullopt;
}

std::string planc_conf_path(std::string_view slurm_conf_path) {
  if (const char* env = std::getenv("PLANC_CONF"); env && *env) return env;
  size_t slash = slurm_conf_path.rfind('/');
  if (slash == std::string_view::npos) return "planc.conf";
  return std::string(slurm_conf_path.substr(0, slash + 1)) + "planc.conf";
}

}  // namespace planc
