#include "common/spot_cap.h"

#include <algorithm>
#include <cstdio>

#include "common/preempt_policy.h"  // guaranteed_advice, format_duration
#include "common/state_file.h"

namespace planc {
namespace {

constexpr std::string_view kHeader = "planc-spot-state v1";

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

}  // namespace

int64_t SpotDayRule::index(time_t t) const {
  return floor_div(static_cast<int64_t>(t) + utc_offset - reset, length);
}

time_t SpotDayRule::start(time_t t) const {
  return static_cast<time_t>(index(t) * length + reset - utc_offset);
}

uint64_t SpotUsage::used(std::string_view account, TierId tier, time_t now) const {
  auto it = by_account_.find(std::string(account));
  if (it == by_account_.end()) return 0;
  const Entry& e = it->second[tier_index(tier)];
  if (now <= as_of_) return e.settled;
  if (rule_.index(now) == rule_.index(as_of_))
    return e.settled + static_cast<uint64_t>(e.running_gpus) * static_cast<uint64_t>(now - as_of_);
  // A new day since the sample: only what runs now counts, from the reset.
  return static_cast<uint64_t>(e.running_gpus) * static_cast<uint64_t>(now - rule_.start(now));
}

void SpotLedger::add(const std::string& account, TierId tier, uint32_t gpus, time_t from, time_t to,
                     time_t day_start) {
  from = std::max(from, day_start);
  if (to <= from || gpus == 0) return;
  settled_[{account, tier}] += static_cast<uint64_t>(gpus) * static_cast<uint64_t>(to - from);
}

void SpotLedger::sample(time_t now, const std::vector<RunningSpotJob>& running,
                        const std::map<uint32_t, time_t>& ended_at) {
  now = std::max(now, as_of_);  // a clock step back counts nothing twice
  if (as_of_ && rule_.index(now) != rule_.index(as_of_)) settled_.clear();
  time_t day_start = rule_.start(now);
  std::map<uint32_t, const RunningSpotJob*> now_running;
  for (const RunningSpotJob& r : running) now_running[r.job_id] = &r;
  for (auto it = tracked_.begin(); it != tracked_.end();) {
    if (now_running.count(it->first)) {
      ++it;
      continue;
    }
    const Tracked& t = it->second;
    auto e = ended_at.find(it->first);
    time_t end = e != ended_at.end() && e->second > 0 ? std::min(e->second, now) : t.counted_until;
    add(t.account, t.tier, t.gpus, t.counted_until, end, day_start);
    it = tracked_.erase(it);
  }
  for (const RunningSpotJob& r : running) {
    auto it = tracked_.find(r.job_id);
    time_t from = r.start_time;
    // Seen before: from where the last sample stopped, unless the job was
    // requeued and started again in between.
    if (it != tracked_.end()) from = std::max(it->second.counted_until, r.start_time);
    add(r.account, r.tier, r.gpus, from, now, day_start);
    tracked_[r.job_id] = {r.account, r.tier, r.gpus, now};
  }
  as_of_ = now;
}

std::vector<uint32_t> SpotLedger::tracked_ids() const {
  std::vector<uint32_t> ids;
  ids.reserve(tracked_.size());
  for (const auto& [id, _] : tracked_) ids.push_back(id);
  return ids;
}

SpotUsage SpotLedger::usage() const {
  SpotUsage u;
  u.rule_ = rule_;
  u.as_of_ = as_of_;
  for (const auto& [key, cs] : settled_)
    u.by_account_[key.first][tier_index(key.second)].settled = cs;
  for (const auto& [id, t] : tracked_)
    u.by_account_[t.account][tier_index(t.tier)].running_gpus += t.gpus;
  return u;
}

// Lines: "asof <time>", "used <tier> <card-seconds> <account>",
// "job <id> <tier> <gpus> <counted until> <account>".
std::string SpotLedger::serialize() const {
  std::string body = "asof " + std::to_string(static_cast<int64_t>(as_of_)) + "\n";
  for (const auto& [key, cs] : settled_)
    body += "used " + std::to_string(tier_index(key.second)) + " " + std::to_string(cs) + " " +
            key.first + "\n";
  for (const auto& [id, t] : tracked_)
    body += "job " + std::to_string(id) + " " + std::to_string(tier_index(t.tier)) + " " +
            std::to_string(t.gpus) + " " + std::to_string(static_cast<int64_t>(t.counted_until)) +
            " " + t.account + "\n";
  return frame_state(kHeader, body, 1 + settled_.size() + tracked_.size());
}

Result<SpotLedger> SpotLedger::parse(std::string_view text, SpotDayRule rule) {
  using R = Result<SpotLedger>;
  uint64_t records = 0;
  auto framed = unframe_state(text, kHeader, &records);
  if (!framed.ok()) return R::failure("not a valid Plan C spot cap state file: " + framed.error());
  std::string_view body = framed.value();
  SpotLedger l(rule);
  auto all = split_lines(body);
  if (!all) return R::failure("line without newline");
  size_t lines = 0;
  auto tier_of = [](std::string_view s, TierId* out) {
    uint64_t v = 0;
    if (!parse_u64(s, &v) || v >= kTierCount) return false;
    *out = static_cast<TierId>(v);
    return true;
  };
  for (std::string_view line : *all) {
    auto w = split_words(line);
    ++lines;
    uint64_t a = 0, b = 0, c = 0;
    TierId tier;
    if (w.size() == 2 && w[0] == "asof" && parse_u64(w[1], &a)) {
      l.as_of_ = static_cast<time_t>(a);
    } else if (w.size() == 4 && w[0] == "used" && tier_of(w[1], &tier) && parse_u64(w[2], &a)) {
      l.settled_[{std::string(w[3]), tier}] = a;
    } else if (w.size() == 6 && w[0] == "job" && parse_u64(w[1], &a) && a && a <= 0xffffffffULL &&
               tier_of(w[2], &tier) && parse_u64(w[3], &b) && b <= 0xffffffffULL &&
               parse_u64(w[4], &c)) {
      l.tracked_[static_cast<uint32_t>(a)] = {std::string(w[5]), tier, static_cast<uint32_t>(b),
                                              static_cast<time_t>(c)};
    } else {
      return R::failure("bad line " + std::to_string(lines));
    }
  }
  if (lines != records) return R::failure("record count does not match the trailer");
  return l;
}

bool spot_capped(const PlancConfig& cfg, TierId tier) {
  return cfg.spot_cap_card_seconds[tier_index(tier)] != kUnlimited;
}

std::string describe_spot_cap(const PlancConfig& cfg, TierId tier) {
  if (!spot_capped(cfg, tier)) return "unlimited";
  return format_card_hours(cfg.spot_cap_card_seconds[tier_index(tier)]) + " card-hours/day";
}

std::string describe_spot_day(const PlancConfig& cfg) {
  return format_time_of_day(cfg.spot_reset_seconds) + " UTC" +
         format_utc_offset(cfg.spot_utc_offset_seconds) + ", every " +
         std::to_string(cfg.spot_day_seconds) + " s";
}

std::string format_time_of_day(uint32_t s) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%02u:%02u:%02u", s / 3600 % 100, s % 3600 / 60, s % 60);
  return buf;
}

std::string format_card_hours(uint64_t cs) {
  uint64_t milli = cs * 1000 / 3600;
  char buf[48];
  if (milli % 10 == 0)
    std::snprintf(buf, sizeof(buf), "%llu.%02llu", static_cast<unsigned long long>(milli / 1000),
                  static_cast<unsigned long long>(milli % 1000 / 10));
  else
    std::snprintf(buf, sizeof(buf), "%llu.%03llu", static_cast<unsigned long long>(milli / 1000),
                  static_cast<unsigned long long>(milli % 1000));
  return buf;
}

std::string format_utc_offset(int32_t s) {
  char buf[16];
  int32_t a = s < 0 ? -s : s;
  std::snprintf(buf, sizeof(buf), "%c%02d:%02d", s < 0 ? '-' : '+', a / 3600, a % 3600 / 60);
  return buf;
}

std::optional<std::string> spot_cap_refusal(const PlancConfig& cfg, const Entitlement& ent,
                                            TierId tier, uint64_t used, time_t now) {
  if (!spot_capped(cfg, tier)) return std::nullopt;
  uint64_t cap = cfg.spot_cap_card_seconds[tier_index(tier)];
  if (used < cap) return std::nullopt;
  const Tier& t = cfg.tiers.tier(tier);
  SpotDayRule rule = SpotDayRule::of(cfg);
  time_t reset = rule.next_reset(now);
  time_t local = reset + cfg.spot_utc_offset_seconds;
  struct tm tm;
  gmtime_r(&local, &tm);
  char when[40];
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
  uint32_t left = static_cast<uint32_t>(reset - now);
  std::string in =
      left >= 3600 ? std::to_string(left / 3600) + " h " + std::to_string(left % 3600 / 60) + " min"
      : left >= 60 ? std::to_string(left / 60) + " min"
                   : std::to_string(left) + " s";
  return "daily spot cap reached: account " + ent.account + " has used " + format_card_hours(used) +
         " of its " + format_card_hours(cap) + " card-hours of " + t.label + " (" + t.qos +
         ") today, counting running jobs. The cap resets at " + when + " UTC" +
         format_utc_offset(cfg.spot_utc_offset_seconds) + " (in " + in + "). " +
         guaranteed_advice(cfg, tier, ent, "To run now, use a guaranteed tier: ", true);
}

}  // namespace planc
