#include "common/market.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "common/job_marks.h"
#include "common/preempt_policy.h"  // format_utc

namespace planc {
namespace {

constexpr Micros kCent = kMicrosPerUnit / 100;

Micros round_to_cent(Micros m) { return (m + kCent / 2) / kCent * kCent; }
Micros ceil_to_cent(Micros m) { return (m + kCent - 1) / kCent * kCent; }

// Multiplier (per mille) at this vacancy: straight lines between the
// points, flat beyond the ends.
int64_t curve_at(const std::vector<FloorPoint>& curve, uint32_t v) {
  if (curve.empty()) return 1000;
  if (v <= curve.front().vacancy_permille) return curve.front().multiplier_permille;
  for (size_t i = 1; i < curve.size(); i++) {
    const FloorPoint &a = curve[i - 1], &b = curve[i];
    if (v > b.vacancy_permille) continue;
    const int64_t span = b.vacancy_permille - a.vacancy_permille;
    const int64_t rise = static_cast<int64_t>(b.multiplier_permille) - a.multiplier_permille;
    // Rounded to the nearest per mille.
    const int64_t num = rise * (v - a.vacancy_permille);
    return a.multiplier_permille +
           (num >= 0 ? (num + span / 2) / span : -((-num + span / 2) / span));
  }
  return curve.back().multiplier_permille;
}

std::string money(Micros m) { return format_micros(m); }

}  // namespace

std::optional<std::vector<FloorPoint>> parse_floor_curve(std::string_view s, std::string* why) {
  std::vector<FloorPoint> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string_view item = s.substr(pos, comma == std::string_view::npos ? s.npos : comma - pos);
    size_t colon = item.find(':');
    auto v = colon == item.npos ? std::nullopt : parse_decimal_micros(item.substr(0, colon));
    auto m = colon == item.npos ? std::nullopt : parse_decimal_micros(item.substr(colon + 1));
    if (!v || !m) {
      *why = "'" + std::string(item) +
             "' is not a point VACANCY:MULTIPLIER (e.g. 0.3:0.8, 30% idle gives 80% of "
             "CardHourPriceFloor)";
      return std::nullopt;
    }
    if (*v > kMicrosPerUnit) {
      *why = "vacancy " + std::string(item.substr(0, colon)) +
             " is above 1 (it is a share of the pool)";
      return std::nullopt;
    }
    if (*m > 10 * kMicrosPerUnit) {
      *why = "multiplier " + std::string(item.substr(colon + 1)) + " is above 10";
      return std::nullopt;
    }
    FloorPoint p{static_cast<uint32_t>(*v / 1000), static_cast<uint32_t>(*m / 1000)};
    if (!out.empty() && p.vacancy_permille <= out.back().vacancy_permille) {
      *why = "vacancies must rise from point to point ('" + std::string(item) + "' does not)";
      return std::nullopt;
    }
    out.push_back(p);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::string format_floor_curve(const std::vector<FloorPoint>& curve) {
  std::string out;
  for (const FloorPoint& p : curve) {
    if (!out.empty()) out += ",";
    out += permille_text(p.vacancy_permille) + ":" + permille_text(p.multiplier_permille);
  }
  return out;
}

Micros market_minimum(Micros list, const MarketConfig& m) {
  return ceil_to_cent(list * m.min_permille / 1000);
}

Micros market_floor(Micros base_floor, Micros list, uint32_t vacancy_permille,
                    const MarketConfig& m) {
  const Micros moved = round_to_cent(base_floor * curve_at(m.floor_curve, vacancy_permille) / 1000);
  return std::min(list, std::max(market_minimum(list, m), moved));
}

void VacancyMeter::advance(time_t now) {
  if (seen_ && now > last_) {
    const double dt = static_cast<double>(now - last_);
    idle_seconds_ += dt * idle_;
    pool_seconds_ += dt * pool_;
  }
  if (now > last_ || !seen_) last_ = now;
}

void VacancyMeter::observe(time_t now, uint32_t idle, uint32_t pool) {
  advance(now);
  seen_ = true;
  idle_ = std::min(idle, pool);
  pool_ = pool;
}

std::optional<uint32_t> VacancyMeter::take(time_t now) {
  advance(now);
  std::optional<uint32_t> out;
  if (pool_seconds_ > 0)
    out = static_cast<uint32_t>(idle_seconds_ * 1000.0 / pool_seconds_ + 0.5);
  else if (seen_ && pool_)
    out = idle_ * 1000 / pool_;  // one sample, no time yet: that sample
  idle_seconds_ = pool_seconds_ = 0;
  return out;
}

time_t next_round_after(time_t now, uint32_t interval) {
  const time_t i = interval ? interval : 1;
  return (now / i + 1) * i;
}

FloorKeeper::FloorKeeper(time_t now, const PlancConfig& cfg) {
  set(cfg, 0);
  floors_.next_round = next_round_after(now, cfg.market.interval_seconds);
}

void FloorKeeper::set(const PlancConfig& cfg, uint32_t vacancy) {
  const Prices& p = cfg.prices;
  floors_.default_floor = market_floor(p.card_hour_floor, p.default_card_hour, vacancy, cfg.market);
  floors_.by_type.clear();
  for (const auto& [type, list] : p.card_hour)
    floors_.by_type[type] = market_floor(p.card_hour_floor, list, vacancy, cfg.market);
}

bool FloorKeeper::sample(time_t now, uint32_t idle, uint32_t pool, const PlancConfig& cfg) {
  meter_.observe(now, idle, pool);
  if (now < floors_.next_round) return false;
  auto v = meter_.take(now);
  floors_.at = now;
  floors_.vacancy = v;
  set(cfg, v.value_or(0));
  floors_.next_round = next_round_after(now, cfg.market.interval_seconds);
  return true;
}

MarketRound clear_market(const std::vector<MarketBid>& bids, uint32_t capacity, Micros floor,
                         Micros list) {
  MarketRound r;
  r.capacity = capacity;
  r.floor = floor;
  r.list = list;
  // Sorted as plain keys (price, submission, job id, index), not through
  // the bids: one contiguous array, no optional in the comparison.
  struct Key {
    Micros price;
    time_t submitted;
    uint32_t job_id, index;
    bool operator<(const Key& o) const {
      if (price != o.price) return price > o.price;
      if (submitted != o.submitted) return submitted < o.submitted;
      return job_id < o.job_id;
    }
  };
  std::vector<Key> in, below;
  in.reserve(bids.size());
  for (uint32_t i = 0; i < bids.size(); i++) {
    const MarketBid& b = bids[i];
    const Key k{b.bid.value_or(list), b.submitted, b.job_id, i};
    (k.price >= floor ? in : below).push_back(k);
  }
  // Only the winners and the first loser need their rank: a heap (built in
  // O(n)) popped until the first bid that does not fit costs O(n + w log n)
  // for w winners, where sorting every bid cost O(n log n) (bench-market:
  // 10,000 bids for a few hundred GPUs).  The rest are outbid in no
  // particular order.
  const auto worse = [](const Key& a, const Key& b) { return b < a; };  // heap top: the best
  std::make_heap(in.begin(), in.end(), worse);
  r.results.reserve(bids.size());
  uint32_t left = capacity;
  std::optional<Micros> first_loser;
  size_t heap = in.size();
  while (heap > 0 && !first_loser) {
    std::pop_heap(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(heap), worse);
    const Key& k = in[--heap];
    BidResult res{k.job_id, k.index, BidOutcome::kWon, k.price, 0};
    if (bids[k.index].gpus <= left) {
      left -= bids[k.index].gpus;
      r.allocated += bids[k.index].gpus;
    } else {
      res.outcome = BidOutcome::kNoRoom;
      first_loser = k.price;
    }
    r.results.push_back(res);
  }
  for (size_t i = 0; i < heap; i++)
    r.results.push_back({in[i].job_id, in[i].index, BidOutcome::kOutbid, in[i].price, 0});
  r.clearing = std::max(floor, first_loser.value_or(floor));
  for (BidResult& res : r.results)
    if (res.outcome == BidOutcome::kWon) res.pays = bids[res.index].locked.value_or(r.clearing);
  for (const Key& k : below)
    r.results.push_back({k.job_id, k.index, BidOutcome::kBelowFloor, k.price, 0});
  return r;
}

std::vector<TypedRound> clear_markets(const std::vector<MarketBid>& bids, const MarketOffer& offer,
                                      const MarketFloors& floors, const Prices& prices) {
  // Bid indices per market; "" is the default market.
  std::map<std::string, std::vector<uint32_t>> by_market;
  for (const auto& [type, free] : offer.by_type) by_market[type];
  for (uint32_t i = 0; i < bids.size(); i++) by_market[bids[i].gpu_type].push_back(i);
  auto clamp = [](int64_t v) {
    return static_cast<uint32_t>(std::clamp<int64_t>(v, 0, UINT32_MAX));
  };
  std::vector<TypedRound> out;
  int64_t left = offer.total;
  auto clear_one = [&](const std::string& type, const std::vector<uint32_t>& members,
                       int64_t capacity) {
    // Every bid in one market (the usual): cleared in place, no copy.
    const bool all = members.size() == bids.size();
    std::vector<MarketBid> sub;
    if (!all) {
      sub.reserve(members.size());
      for (uint32_t i : members) sub.push_back(bids[i]);
    }
    const auto floor_it = floors.by_type.find(type);
    const auto list_it = prices.card_hour.find(type);
    TypedRound t;
    t.gpu_type = type.empty() ? "default" : type;
    t.round = clear_market(
        all ? bids : sub, clamp(std::min(capacity, left)),
        floor_it != floors.by_type.end() ? floor_it->second : floors.default_floor,
        list_it != prices.card_hour.end() ? list_it->second : prices.default_card_hour);
    if (!all)
      for (BidResult& r : t.round.results) r.index = members[r.index];
    left -= t.round.allocated;
    out.push_back(std::move(t));
  };
  for (const auto& [type, members] : by_market) {
    if (type.empty()) continue;
    auto free = offer.by_type.find(type);
    clear_one(type, members, free != offer.by_type.end() ? free->second : 0);
  }
  auto untyped = by_market.find("");
  if (untyped != by_market.end() || out.empty())
    clear_one("", untyped != by_market.end() ? untyped->second : std::vector<uint32_t>{}, left);
  return out;
}

std::string gpu_type_of(std::string_view tres) {
  for (size_t at = tres.find("gpu:"); at != tres.npos; at = tres.find("gpu:", at + 1)) {
    if (at > 0 && tres[at - 1] != ':' && tres[at - 1] != '/') continue;
    size_t b = at + 4, e = tres.find_first_of(":,=", b);
    std::string_view tok = tres.substr(b, e == tres.npos ? tres.npos : e - b);
    if (tok.empty() || tok.find_first_not_of("0123456789") == tres.npos) continue;
    return ascii_lower(tok);
  }
  return "";
}

MarketCheck check_market_request(const MarketRequest& r, time_t now, const MarketConfig& m) {
  MarketCheck c;
  auto refuse = [&](std::string why) {
    c.ok = false;
    c.error = std::move(why);
    return c;
  };
  const bool spot = r.tier == "P2" || r.tier == "P3";
  if (!r.bid_text.empty()) {
    auto bid = parse_decimal_micros(r.bid_text);
    if (!bid || *bid <= 0)
      return refuse("--bid=" + r.bid_text + " is not a price: give a card-hour price in " +
                    r.currency + ", e.g. --bid=12.50");
    if (r.tier != "P2")
      return refuse("--bid is for P2 jobs (the spot market); this job is " + r.tier +
                    ": submit it with --qos=p2-spot, or leave --bid out");
    const Micros minimum = market_minimum(r.list, m);
    if (*bid < minimum)
      return refuse("--bid=" + r.bid_text + " is below the market's minimum of " + money(minimum) +
                    " " + r.currency + " per card-hour (" + permille_text(m.min_permille) +
                    " of the list price " + money(r.list) + "): bid at least " + money(minimum));
    if (*bid > r.list)
      return refuse("--bid=" + r.bid_text + " is above the list price of " + money(r.list) + " " +
                    r.currency + " per card-hour: a guaranteed tier costs that; bid at most " +
                    money(r.list));
    c.bid = bid;
    if (*bid < r.floor)
      c.note = "bid " + money(*bid) + " " + r.currency +
               " per card-hour is below the current floor " + money(r.floor) +
               ": the job waits until the floor falls to it";
  }
  if (r.lock_price) {
    if (!r.bid_text.empty())
      return refuse(
          "--bid and --lock-price together: a locked booking pays the floor at booking and "
          "takes part in no round; give one of them");
    if (r.tier != "P2")
      return refuse("--lock-price is for P2 jobs (the spot market); this job is " + r.tier +
                    ": submit it with --qos=p2-spot, or leave --lock-price out");
    if (!r.begin)
      return refuse(
          "--lock-price needs --begin: a price is locked for a job booked ahead, e.g. "
          "--begin=now+2hours --lock-price");
    if (r.begin > now + static_cast<time_t>(m.lock_ahead_seconds))
      return refuse("--lock-price: --begin is " + std::to_string((r.begin - now + 3599) / 3600) +
                    " h ahead; a price can be locked at most " +
                    std::to_string(m.lock_ahead_seconds / 3600) +
                    " h ahead: book nearer the start, or leave --lock-price out");
  }
  if (r.spot_fallback) {
    if (!spot)
      return refuse("--spot-fallback is for P2 and P3 jobs; this job is " + r.tier +
                    ", which is never preempted: leave --spot-fallback out");
    if (!r.has_guaranteed_alternative)
      return refuse("--spot-fallback: account " + r.account +
                    " may not use a guaranteed tier to fall back to; ask your admin to add "
                    "one to the account, or leave --spot-fallback out");
  }
  return c;
}

namespace {

std::string bid_text(std::optional<Micros> bid, const std::string& currency) {
  return bid ? "bid " + format_micros(*bid) + " " + currency + "/card-hour"
             : std::string("no bid (the clearing price, at most list)");
}

std::optional<Micros> decimal_after(std::string_view s, std::string_view lead) {
  size_t at = s.find(lead);
  if (at == s.npos) return std::nullopt;
  std::string_view v = s.substr(at + lead.size());
  return parse_decimal_micros(v.substr(0, v.find(' ')));
}

}  // namespace

std::optional<MarketMark> read_market_mark(std::string_view s) {
  auto found = find_tagged_mark(s, kMarketTag);
  if (!found) return std::nullopt;
  std::string_view mark = *found;
  MarketMark m;
  m.bid = decimal_after(mark, "] bid ");
  m.matched = decimal_after(mark, "; matched at ");
  m.locked = decimal_after(mark, "] locked at ");
  return m;
}

std::string market_mark_locked(Micros price, const std::string& currency, time_t booked_at) {
  return std::string(kMarketTag) + " locked at " + format_micros(price) + " " + currency +
         "/card-hour, the floor when booked at " + format_utc(booked_at) +
         "; no round: it runs from its --begin time";
}

std::string market_mark_waiting(std::optional<Micros> bid, const std::string& currency,
                                time_t next_round) {
  return std::string(kMarketTag) + " " + bid_text(bid, currency) + "; waiting for the round at " +
         format_utc(next_round);
}

std::optional<std::string> market_release_refusal(std::string_view admin_comment, uint32_t job_id,
                                                  uint32_t interval) {
  auto mark = read_market_mark(admin_comment);
  if (!mark || mark->matched || mark->locked) return std::nullopt;
  return "JobId=" + std::to_string(job_id) +
         " bids in the P2 market: the round it wins releases it (" + round_cadence(interval) +
         "); it cannot be released by hand.  To run it outside the market, cancel it and submit "
         "it to another tier";
}

std::string round_cadence(uint32_t interval) {
  if (interval && interval % 60 == 0 && 3600 % interval == 0 && interval < 3600) {
    std::string at;
    for (uint32_t m = 0; m < 60; m += interval / 60) {
      std::string mm = (m < 10 ? ":0" : ":") + std::to_string(m);
      at += at.empty() ? mm : (m + interval / 60 >= 60 ? " or " : ", ") + mm;
    }
    return "rounds every " + format_duration(interval) + ", the next at " + at + " UTC";
  }
  return "rounds every " + format_duration(interval) + " (planc-bill market shows the next)";
}

std::string market_mark_result(const BidResult& r, std::optional<Micros> bid,
                               const MarketRound& round, const std::string& currency, time_t at,
                               uint32_t interval) {
  std::string o = std::string(kMarketTag) + " " + bid_text(bid, currency) + "; ";
  switch (r.outcome) {
    case BidOutcome::kWon:
      return o + "matched at " + format_micros(r.pays) + " " + currency +
             "/card-hour in the round at " + format_utc(at);
    case BidOutcome::kBelowFloor:
      return o + "below the floor " + format_micros(round.floor) + "; " + round_cadence(interval);
    case BidOutcome::kNoRoom:
    case BidOutcome::kOutbid:
      return o + "not matched (" + (r.outcome == BidOutcome::kNoRoom ? "no room" : "outbid") +
             "; the last round cleared at " + format_micros(round.clearing) + "); " +
             round_cadence(interval);
  }
  return o;
}

std::string with_market_mark(std::string_view s, std::string_view mark) {
  return with_tagged_mark(s, kMarketTag, mark);
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// "default=8.00,h800=8.00 CNY/card-hour" -> {type: price}, currency.
std::vector<std::pair<std::string, Micros>> price_list(std::string_view v, std::string* currency) {
  std::vector<std::pair<std::string, Micros>> out;
  size_t sp = v.find(' ');
  if (sp != v.npos && currency) {
    std::string_view unit = v.substr(sp + 1);
    *currency = std::string(unit.substr(0, unit.find('/')));
  }
  std::string_view list = v.substr(0, sp);
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    size_t eq = item.find('=');
    if (eq != item.npos)
      if (auto m = parse_decimal_micros(item.substr(eq + 1)))
        out.emplace_back(std::string(item.substr(0, eq)), *m);
    if (comma == list.npos) break;
    list.remove_prefix(comma + 1);
  }
  return out;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

}  // namespace

MarketStatus parse_market_status(std::string_view text) {
  MarketStatus s;
  size_t at = text.find("----- slurmctld/planc");
  if (at == text.npos) return s;
  s.found = true;
  text.remove_prefix(at);
  text.remove_prefix(
      std::min(text.size(), text.find('\n') == text.npos ? text.size() : text.find('\n') + 1));
  std::vector<std::pair<std::string, Micros>> floors, lists;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == text.npos ? text.size() : nl + 1);
    if (line.rfind("-----", 0) == 0) break;  // the next plugin's section
    size_t eq = line.find(" = ");
    if (eq == line.npos) continue;
    std::string_view key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 3));
    if (key == "Market")
      s.open = value == "yes";
    else if (key == "MarketFloor")
      floors = price_list(value, &s.currency);
    else if (key == "MarketListPrice")
      lists = price_list(value, nullptr);
    else if (key == "MarketVacancy")
      s.vacancy = value;
    else if (key == "MarketLastRound")
      s.last_round = value;
    else if (key == "MarketNextRound")
      s.next_round = value;
    else if (key == "MarketInterval")
      s.interval = value;
    else if (key == "MarketFloorCurve")
      s.curve = value;
    else if (key == "MarketMinFraction")
      s.min_fraction = value;
    else if (key == "MarketLastClearing")
      s.last_clearing = value;
  }
  for (const auto& [type, floor] : floors) {
    MarketStatus::Price p{type, floor, 0};
    for (const auto& [t, list] : lists)
      if (t == type) p.list = list;
    s.prices.push_back(p);
  }
  return s;
}

namespace {
constexpr size_t kOwnJobIdWidth = 20, kOwnStateWidth = 4;
}  // namespace

std::string own_jobs_format() {
  return "JobID:" + std::to_string(kOwnJobIdWidth) +
         ",StateCompact:" + std::to_string(kOwnStateWidth) + ",admin_comment:4096";
}

std::vector<MarketStatus::OwnJob> parse_own_market_jobs(std::string_view out) {
  constexpr size_t kCommentAt = kOwnJobIdWidth + kOwnStateWidth;
  std::vector<MarketStatus::OwnJob> jobs;
  while (!out.empty()) {
    size_t nl = out.find('\n');
    std::string_view line = out.substr(0, nl);
    out = nl == out.npos ? std::string_view() : out.substr(nl + 1);
    if (line.size() <= kCommentAt) continue;
    auto mark = find_tagged_mark(line.substr(kCommentAt), kMarketTag);
    if (!mark) continue;
    std::string_view m = trim(*mark);
    MarketStatus::OwnJob j;
    j.job_id = trim(line.substr(0, kOwnJobIdWidth));
    j.state = trim(line.substr(kOwnJobIdWidth, kOwnStateWidth));
    j.prices = *read_market_mark(m);
    m.remove_prefix(std::min(m.size(), kMarketTag.size() + 1));
    j.mark = m;
    jobs.push_back(std::move(j));
  }
  return jobs;
}

namespace {
// Hours with one decimal (4.2), two below an hour (0.05).
std::string hours_text(double seconds) {
  char buf[32];
  const double h = seconds / 3600.0;
  std::snprintf(buf, sizeof buf, h < 1 ? "%.2f" : "%.1f", h);
  return buf;
}
}  // namespace

std::string format_market_status(const MarketStatus& s, bool json) {
  auto vs_list = [](const MarketStatus::Price& p) -> int64_t {
    if (!p.list) return 0;
    const int64_t d = (p.floor - p.list) * 100;
    return d >= 0 ? (d + p.list / 2) / p.list : -((-d + p.list / 2) / p.list);
  };
  if (json) {
    std::string o = "{\"market\": " + json_string(!s.found ? "unknown"
                                                  : s.open ? "open"
                                                           : "closed");
    if (s.open) {
      o += ", \"currency\": " + json_string(s.currency) + ", \"floors\": [";
      for (size_t i = 0; i < s.prices.size(); i++) {
        const auto& p = s.prices[i];
        o += std::string(i ? ", " : "") + "{\"gpu_type\": " + json_string(p.gpu_type) +
             ", \"floor\": " + json_string(format_micros(p.floor)) +
             ", \"list\": " + json_string(format_micros(p.list)) +
             ", \"vs_list_percent\": " + std::to_string(vs_list(p)) + "}";
      }
      o += "], \"vacancy\": " + json_string(s.vacancy) +
           ", \"last_round\": " + json_string(s.last_round) +
           ", \"next_round\": " + json_string(s.next_round) +
           ", \"interval\": " + json_string(s.interval) +
           ", \"last_clearing\": " + json_string(s.last_clearing);
      if (const auto& i = s.interruption) {
        o += ", \"expected_interruption\": {\"window_hours\": " + std::to_string(i->window_hours);
        if (!i->error.empty())
          o += ", \"error\": " + json_string(i->error);
        else
          o += ", \"p2_runs\": " + std::to_string(i->runs) +
               ", \"preempted\": " + std::to_string(i->preempted) +
               ", \"mean_run_hours\": " + json_string(hours_text(i->mean_run_seconds));
        o += "}";
      }
      if (const auto& own = s.own_jobs) {
        o += ", \"your_jobs\": [";
        for (size_t i = 0; i < own->size(); i++) {
          const auto& j = (*own)[i];
          auto price = [](const std::optional<Micros>& v) {
            return v ? json_string(format_micros(*v)) : std::string("null");
          };
          o += std::string(i ? ", " : "") + "{\"job_id\": " + json_string(j.job_id) +
               ", \"state\": " + json_string(j.state) + ", \"bid\": " + price(j.prices.bid) +
               ", \"matched\": " + price(j.prices.matched) +
               ", \"locked\": " + price(j.prices.locked) + ", \"market\": " + json_string(j.mark) +
               "}";
        }
        o += "]";
      }
    }
    return o + "}\n";
  }
  if (!s.found)
    return "slurmctld/planc is not running on this cluster (SlurmctldPlugstack=planc): no market "
           "to show.\n";
  if (!s.open) return "The P2 spot market is not open on this cluster (planc.conf Market=no).\n";
  std::string o;
  for (size_t i = 0; i < s.prices.size(); i++) {
    const auto& p = s.prices[i];
    std::string type = p.gpu_type == "default" ? "other GPUs" : p.gpu_type;
    for (char& c : type)
      if (p.gpu_type != "default")
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const int64_t pct = vs_list(p);
    o += std::string(i ? "               " : "Current floor: ") + type + " @ " +
         format_micros(p.floor) + " " + s.currency + "/card-hour (" + (pct > 0 ? "+" : "") +
         std::to_string(pct) + "% vs list " + format_micros(p.list) + ")\n";
  }
  o += "Vacancy:       " + s.vacancy + " of the GPUs idle over the last round's interval\n";
  o += "Last round:    " + s.last_round + "; next round " + s.next_round + " (every " + s.interval +
       ")\n";
  o += "Last clearing: " + (s.last_clearing.empty() ? std::string("none yet") : s.last_clearing) +
       "\n";
  if (const auto& i = s.interruption) {
    const std::string window = "in the last " + std::to_string(i->window_hours) + " h";
    o += "Expected interruption: may be preempted by P0 or P1 (guaranteed work); ";
    if (!i->error.empty())
      o += "how long P2 jobs run is unknown (the bills could not be read: " + i->error + ")\n";
    else if (!i->runs)
      o += "no P2 run ended " + window + "\n";
    else
      o += "P2 jobs have run " + hours_text(i->mean_run_seconds) + " h on average " + window +
           " (" + std::to_string(i->runs) + " runs ended, " + std::to_string(i->preempted) +
           " preempted)\n";
  }
  if (const auto& own = s.own_jobs) {
    if (own->empty()) o += "Your P2 jobs:  none in the market\n";
    for (size_t i = 0; i < own->size(); i++)
      o += std::string(i ? "               " : "Your P2 jobs:  ") + (*own)[i].job_id + " " +
           (*own)[i].state + ": " + (*own)[i].mark + "\n";
  }
  return o;
}

}  // namespace planc
