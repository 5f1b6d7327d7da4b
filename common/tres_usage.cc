#include "common/tres_usage.h"

#include <algorithm>
#include <charconv>
#include <utility>

namespace planc {
namespace {

// Slurm's "no value" markers (slurm.h NO_VAL64, INFINITE64).
constexpr uint64_t kNoVal64 = 0xfffffffffffffffeULL;
constexpr uint64_t kInfinite64 = 0xffffffffffffffffULL;

template <typename T>
bool whole_number(std::string_view s, T* out) {
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// The id slurmdbd's table gives a TRES type with no name ("cpu", "mem").
uint32_t id_of(const TresNames& names, std::string_view type) {
  for (const auto& [id, n] : names)
    if (n.type == type && n.name.empty()) return id;
  return 0;
}

}  // namespace

ParsedTres parse_tres_counts(std::string_view text) {
  ParsedTres out;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    uint32_t id = 0;
    uint64_t count = 0;
    if (eq == std::string_view::npos || !whole_number(item.substr(0, eq), &id) ||
        !whole_number(item.substr(eq + 1), &count)) {
      out.malformed++;
      continue;
    }
    if (count == kNoVal64 || count == kInfinite64) continue;
    out.counts[id] = count;
  }
  return out;
}

std::string format_tres_usage(const TresCounts& counts, const TresNames& names) {
  std::vector<std::pair<std::string, uint64_t>> named;
  for (const auto& [id, count] : counts) {
    auto n = names.find(id);
    named.emplace_back(n == names.end() ? "tres" + std::to_string(id) : n->second.key(), count);
  }
  std::sort(named.begin(), named.end());
  std::string out;
  for (const auto& [key, count] : named) {
    if (!out.empty()) out += ',';
    out += key + '=' + std::to_string(count);
  }
  return out;
}

RunUsage summarize_steps(const std::vector<StepUsage>& steps, const TresNames& names) {
  RunUsage u;
  const uint32_t cpu = id_of(names, "cpu"), mem = id_of(names, "mem");
  TresCounts tot;
  int64_t cpu_micros = 0, max_rss = -1;
  for (const StepUsage& s : steps) {
    if (!s.finished) {
      u.unfinished_steps++;
      continue;
    }
    ParsedTres t = parse_tres_counts(s.usage_in_tot);
    ParsedTres m = parse_tres_counts(s.usage_in_max);
    u.malformed += t.malformed + m.malformed;
    // CPU time comes from the task's rusage at its exit, the TRES counts
    // from polls: a step shorter than the first poll has only the former.
    // jobacct_gather/none records neither.
    bool has_data =
        s.cpu_micro_seconds > 0 || (cpu && t.counts.count(cpu)) || (mem && t.counts.count(mem));
    if (!has_data) {
      u.steps_without_data++;
      continue;
    }
    u.measured = true;
    cpu_micros += s.cpu_micro_seconds;
    for (const auto& [id, count] : t.counts) tot[id] += count;
    if (auto r = m.counts.find(mem); mem && r != m.counts.end())
      max_rss = std::max(max_rss, static_cast<int64_t>(r->second));
  }
  if (!u.measured) return u;
  u.cpu_micro_seconds = cpu_micros;
  u.max_rss_bytes = max_rss;
  u.usage_in_tot = format_tres_usage(tot, names);
  return u;
}

}  // namespace planc
