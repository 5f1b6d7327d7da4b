#include "common/billing.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "common/infusion.h"
#include "common/market_life.h"

namespace planc {
namespace {

using i128 = __int128;

constexpr int64_t kSecondsPerHour = 3600;

// Round half up of a non-negative rational num/den.
int64_t round_half_up(i128 num, i128 den) {
  return static_cast<int64_t>((2 * num + den) / (2 * den));
}

std::string lower(std::string_view s) { return ascii_lower(s); }

Micros card_price(const PlancConfig& cfg, const std::string& type) {
  auto it = cfg.prices.card_hour.find(lower(type));
  return it == cfg.prices.card_hour.end() ? cfg.prices.default_card_hour : it->second;
}

}  // namespace

int64_t card_micros_of(const PlancConfig& cfg, const GresUse& g, std::string* note) {
  const std::string name = lower(g.name);
  const auto count = static_cast<int64_t>(g.count);
  if (name == "gpu") {
    auto w = cfg.prices.card_weight.find(lower(g.type));
    Micros weight = w == cfg.prices.card_weight.end() ? kMicrosPerUnit : w->second;
    return count * weight;
  }
  if (name == "mps") return count * kMicrosPerUnit / std::max<uint32_t>(cfg.prices.mps_per_card, 1);
  if (name == "shard") {
    if (!cfg.prices.shards_per_card) {
      if (note) *note += "gres/shard not billed as cards: ShardsPerCard is not set in planc.conf; ";
      return 0;
    }
    return count * kMicrosPerUnit / cfg.prices.shards_per_card;
  }
  return 0;
}

Bill price_segment(const PlancConfig& cfg, const Segment& seg) {
  Bill b;
  b.seg = seg;
  b.currency = cfg.prices.currency;
  b.core_hour_price = cfg.prices.core_hour;
  b.mem_gib_hour_price = cfg.prices.mem_gib_hour;
  const Tier* tier = cfg.tiers.find_by_qos(seg.qos);
  if (tier) {
    b.tier = tier->label;
    b.price_permille = tier->price_permille;
  } else {
    b.note += "QoS '" + seg.qos + "' is not a Plan C tier: list price applied; ";
  }
  if (seg.ran) {
    int64_t wall = std::max<int64_t>(seg.end_time - seg.start_time, 0);
    b.billable_seconds = std::max<int64_t>(wall - std::max<int64_t>(seg.suspended_seconds, 0), 0);
  }

  // Cards by GPU type: each type has its own price.
  i128 card_value = 0;  // sum of card_micro_seconds * price (micros)
  std::string single_type;
  bool mixed = false, any_card = false;
  for (const GresUse& g : seg.gres) {
    int64_t cm = card_micros_of(cfg, g, &b.note);
    if (!cm) continue;
    std::string type = lower(g.type);
    if (!any_card) {
      single_type = type;
      any_card = true;
    } else if (type != single_type) {
      mixed = true;
    }
    b.card_micros += cm;
    int64_t cms = cm * b.billable_seconds;
    b.card_micro_seconds += cms;
    card_value += static_cast<i128>(cms) * card_price(cfg, type);
    if (!b.gpu_detail.empty()) b.gpu_detail += ",";
    b.gpu_detail += lower(g.name) + ":" + (type.empty() ? "" : type + ":") +
                    std::to_string(g.count) + "=" + format_card_seconds(cm) + " cards";
  }
  // Trim "x.000000 cards" noise is not worth it: the detail is for audit.
  b.card_hour_price = !any_card ? 0 : mixed ? -1 : card_price(cfg, single_type);
  // A P2 run matched in the market (common/market.h) pays the price it was
  // matched at per card-hour, whatever the GPU type, instead of list x the
  // tier's factor; cores and memory keep the tier's factor.
  // A run booked with --lock-price pays its locked price the same way.
  // A P2 run the market priced (common/market_life.h: matched in a round,
  // a --lock-price booking, or a run started outside the rounds at the
  // floor) pays that price per card-hour, whatever the GPU type, instead
  // of list x the tier's factor; cores and memory keep the tier's factor.
  // The life must be for this very run: a win covers one run.
  std::optional<Micros> matched;
  std::string how;
  if (tier && tier->id == TierId::kP2)
    if (auto life = parse_life(seg.admin_comment))
      if (auto p = run_price(*life, seg.segment)) {
        matched = p->price;
        how = p->how;
      }
  if (matched && any_card) {
    card_value = static_cast<i128>(b.card_micro_seconds) * *matched;
    b.card_hour_price = *matched;
    b.note += "P2 market: cards at the " + how + " " + format_micros(*matched) + " " + b.currency +
              "/card-hour" + (how == "floor" ? " (the run started outside the rounds)" : "") + "; ";
  }
  // A serving replica capacity infusion added (common/infusion.h): billed
  // to its pool's own account at its tier's price, the platform's internal
  // cost of what infusion served; the note says so for the report.
  if (auto r = read_infused_mark(seg.admin_comment))
    b.note += "capacity infusion: a replica of pool " + r->pool + ", internal cost of account " +
              seg.account + "; ";
  b.core_seconds = static_cast<int64_t>(seg.cpus) * b.billable_seconds;
  b.mem_mib_seconds = static_cast<int64_t>(seg.mem_mib) * b.billable_seconds;

  if (!seg.ran) {
    b.zero_reason = kNeverRan;
  } else if ((seg.state == "PREEMPTED" || seg.preempted) && tier && tier->preemptible) {
    b.zero_reason = seg.state == "PREEMPTED"
                        ? "preempted: unfinished preempted time is not billed"
                        : "preempted: " + lower(seg.state) +
                              " during its grace; unfinished preempted time is not billed";
  } else if (seg.state == "NODE_FAIL") {
    b.zero_reason = "node failure: a run lost to a failed node is not billed";
  } else if (seg.free_attempt) {
    b.zero_reason = "free attempt after starvation upgrade";
  } else if (b.billable_seconds == 0) {
    b.zero_reason = "zero billable seconds";
  }
  if (!b.zero_reason.empty()) return b;

  // Exact amount in micros = [card_value/1e6 + core_s*core_price +
  // mem_mib_s*mem_price/1024] / 3600, times permille/1000.  One common
  // denominator, one rounding (to micro-units; see billing.h).
  const i128 den = static_cast<i128>(kMicrosPerUnit) * 1024 * kSecondsPerHour * 1000;
  i128 num = static_cast<i128>(b.core_seconds) * b.core_hour_price * kMicrosPerUnit * 1024 +
             static_cast<i128>(b.mem_mib_seconds) * b.mem_gib_hour_price * kMicrosPerUnit;
  num *= b.price_permille;
  num += card_value * 1024 * (matched ? 1000 : b.price_permille);
  b.amount_micros = round_half_up(num, den);
  b.amount_minor = minor_of_micros(b.amount_micros);
  if (b.amount_micros == 0) {
    if (!b.card_micro_seconds && !b.core_seconds && !b.mem_mib_seconds)
      b.zero_reason = "nothing billable allocated: no GPU cards, cores or memory";
    else if (num == 0)
      b.zero_reason =
          "zero price: planc.conf prices (or the tier's PriceFactor) are 0 for what it held";
    else
      b.zero_reason = "exact amount below half a micro-unit (0.0000005 " + b.currency + ")";
  }
  return b;
}

int64_t minor_of_micros(int64_t micros) {
  return round_half_up(std::max<int64_t>(micros, 0), kMicrosPerMinor);
}

ExitCode exit_code_of(uint32_t wait_status) {
  const int st = static_cast<int>(wait_status);
  ExitCode e;
  if (WIFEXITED(st)) e.status = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) e.signal = WTERMSIG(st);
  // sacct: a signal wins; an exit status of 128 or more loses 128.
  uint32_t shown = e.signal ? 0 : e.status >= 128 ? e.status - 128 : e.status;
  e.text = std::to_string(shown) + ":" + std::to_string(e.signal);
  return e;
}

std::vector<HourSlice> split_by_hour(const Bill& bill) {
  std::vector<HourSlice> out;
  const int64_t start = bill.seg.start_time, end = bill.seg.end_time;
  const int64_t wall = end - start;
  if (!bill.seg.ran || wall <= 0) {
    // Nothing to spread; keep one (empty or zero-length) slice so the
    // segment still counts in its hour.
    HourSlice s;
    s.hour = start - ((start % kSecondsPerHour) + kSecondsPerHour) % kSecondsPerHour;
    s.card_micro_seconds = bill.card_micro_seconds;
    s.core_seconds = bill.core_seconds;
    s.mem_mib_seconds = bill.mem_mib_seconds;
    s.amount_micros = bill.amount_micros;
    out.push_back(s);
    return out;
  }
  auto share = [wall](int64_t q, int64_t t) {
    return static_cast<int64_t>(static_cast<i128>(q) * t / wall);
  };
  int64_t hour = start - ((start % kSecondsPerHour) + kSecondsPerHour) % kSecondsPerHour;
  for (; hour < end; hour += kSecondsPerHour) {
    int64_t a = std::max(hour, start) - start, z = std::min(hour + kSecondsPerHour, end) - start;
    HourSlice s;
    s.hour = hour;
    s.seconds = z - a;
    s.card_micro_seconds = share(bill.card_micro_seconds, z) - share(bill.card_micro_seconds, a);
    s.core_seconds = share(bill.core_seconds, z) - share(bill.core_seconds, a);
    s.mem_mib_seconds = share(bill.mem_mib_seconds, z) - share(bill.mem_mib_seconds, a);
    s.amount_micros = share(bill.amount_micros, z) - share(bill.amount_micros, a);
    out.push_back(s);
  }
  return out;
}

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0.
size_t utf8_len(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (!n || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; k++)
    if ((b(i + k) & 0xc0) != 0x80) return 0;
  uint32_t cp = n == 1 ? c : c & (0xff >> (n + 1));
  for (size_t k = 1; k < n; k++) cp = (cp << 6) | (b(i + k) & 0x3f);
  static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

void valid_utf8(std::string* s) {
  std::string out;
  bool changed = false;
  for (size_t i = 0; i < s->size();) {
    size_t n = utf8_len(*s, i);
    if (n) {
      out.append(*s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      i++;
      changed = true;
    }
  }
  if (changed) *s = std::move(out);
}

}  // namespace

void make_text_valid_utf8(Segment* seg) {
  for (std::string* f :
       {&seg->cluster, &seg->user, &seg->account, &seg->qos, &seg->partition, &seg->nodes,
        &seg->state, &seg->job_name, &seg->tres_req, &seg->tres_alloc, &seg->admin_comment})
    valid_utf8(f);
  for (GresUse& g : seg->gres) {
    valid_utf8(&g.name);
    valid_utf8(&g.type);
  }
}

std::string format_minor(int64_t minor) {
  char buf[40];
  uint64_t m = minor < 0 ? static_cast<uint64_t>(-(minor + 1)) + 1 : static_cast<uint64_t>(minor);
  std::snprintf(buf, sizeof buf, "%s%llu.%02llu", minor < 0 ? "-" : "",
                static_cast<unsigned long long>(m / 100), static_cast<unsigned long long>(m % 100));
  return buf;
}

std::string format_micros6(int64_t micros) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld.%06lld", static_cast<long long>(micros / kMicrosPerUnit),
                static_cast<long long>(micros % kMicrosPerUnit));
  return buf;
}

}  // namespace planc
