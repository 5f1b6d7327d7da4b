#include "common/idle_meter.h"

#include <algorithm>

namespace planc {

void IdleMeter::observe(time_t now, uint32_t idle, uint32_t pool) {
  if (!samples_.empty() && now < samples_.back().at) return;
  idle = std::min(idle, pool);
  samples_.push_back({now, idle, pool});
  // Keep one sample at or before the oldest time anyone asks about.
  while (samples_.size() > 2 && samples_[1].at <= now - static_cast<time_t>(keep_))
    samples_.pop_front();
  if (pool) crossings_.observe(static_cast<double>(idle) / static_cast<double>(pool));
}

std::optional<IdleMeter::Measure> IdleMeter::mean(time_t from, time_t now) const {
  double idle = 0, pool = 0;
  for (size_t i = 0; i < samples_.size(); i++) {
    const time_t a = std::max(samples_[i].at, from);
    const time_t b = i + 1 < samples_.size() ? std::min(samples_[i + 1].at, now) : now;
    if (b <= a) continue;
    idle += static_cast<double>(samples_[i].idle) * static_cast<double>(b - a);
    pool += static_cast<double>(samples_[i].pool) * static_cast<double>(b - a);
  }
  const double span = static_cast<double>(now - from);
  if (span <= 0) return std::nullopt;
  Measure m;
  m.idle_gpus = static_cast<uint32_t>(idle / span);
  m.pool_gpus = static_cast<uint32_t>(pool / span + 0.5);
  m.idle_permille = pool > 0 ? static_cast<uint32_t>(idle * 1000.0 / pool + 0.5) : 0;
  return m;
}

std::optional<IdleMeter::Measure> IdleMeter::measure(time_t now, uint32_t seconds) const {
  const time_t from = now - static_cast<time_t>(seconds);
  if (samples_.empty() || samples_.front().at > from || seconds == 0) return std::nullopt;
  return mean(from, now);
}

std::optional<IdleMeter::Measure> IdleMeter::measure_since(time_t from, time_t now) const {
  if (samples_.empty() || samples_.front().at > now) return std::nullopt;
  from = std::max(from, samples_.front().at);
  if (from >= now) {
    // No time yet: the sample itself.
    const Sample& s = samples_.back();
    Measure m{s.idle, s.pool, s.pool ? s.idle * 1000 / s.pool : 0};
    return m;
  }
  return mean(from, now);
}

}  // namespace planc
