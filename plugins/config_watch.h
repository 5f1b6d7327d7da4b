// planc.conf reloaded without a restart.
//
// Each Plan C plugin keeps the configuration it loaded at init() and asks
// a ConfigWatch, from its own background thread (never under slurmctld's
// locks: this reads a file), whether planc.conf has changed: its mtime,
// size or inode, looked at no more often than kConfigCheckInterval, or at
// once when `force` is set (jobcomp/planc on `scontrol reconfigure`, the
// one plugin call Slurm 22.05 makes then).  A changed file is read and
// validated completely before it replaces anything; a bad one keeps the
// old configuration in force and is logged once, with the file, line and
// key.  The caller swaps its whole snapshot at once, so readers see the old
// configuration or the new one, never half of each.
//
// Not thread-safe: one owning thread per instance.
#ifndef PLANC_PLUGINS_CONFIG_WATCH_H_
#define PLANC_PLUGINS_CONFIG_WATCH_H_

#include <sys/stat.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/config.h"

namespace planc {

inline constexpr auto kConfigCheckInterval = std::chrono::seconds(2);

class ConfigWatch {
 public:
  // `path`: the file `loaded` came from.
  ConfigWatch(std::string path, std::shared_ptr<const PlancConfig> loaded)
      : path_(std::move(path)), current_(std::move(loaded)) {
    stamp_ = stamp_of(path_);
  }

  const std::string& path() const { return path_; }
  const std::shared_ptr<const PlancConfig>& current() const { return current_; }

  // The new configuration when planc.conf changed and is valid, else
  // nullptr (unchanged, not due yet, or bad: then `*error` is set the first
  // time this version of the file is seen).  `force`: look now, whatever
  // the interval.
  std::shared_ptr<const PlancConfig> poll(bool force, std::string* error) {
    auto now = std::chrono::steady_clock::now();
    if (!force && now - last_check_ < kConfigCheckInterval) return nullptr;
    last_check_ = now;
    Stamp s = stamp_of(path_);
    if (s == stamp_) return nullptr;
    bool seen_bad = s == bad_stamp_;
    stamp_ = s;
    Result<PlancConfig> r = load_config(path_);
    if (!r.ok()) {
      if (!seen_bad) {
        refused_++;
        if (error) *error = r.error();
      }
      bad_stamp_ = s;
      return nullptr;
    }
    bad_stamp_ = Stamp{};
    current_ = std::make_shared<const PlancConfig>(std::move(r).value());
    reloaded_++;
    return current_;
  }

  // Changed files put in force, and refused (each version of a bad file
  // once), since this watch was made.
  uint64_t reloaded() const { return reloaded_; }
  uint64_t refused() const { return refused_; }

 private:
  struct Stamp {
    int64_t sec = -1, nsec = 0, size = 0;
    uint64_t ino = 0;
    bool operator==(const Stamp&) const = default;
  };
  static Stamp stamp_of(const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return Stamp{};
    return Stamp{st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_size, st.st_ino};
  }

  std::string path_;
  std::shared_ptr<const PlancConfig> current_;
  Stamp stamp_, bad_stamp_;
  uint64_t reloaded_ = 0, refused_ = 0;
  std::chrono::steady_clock::time_point last_check_{};
};

}  // namespace planc

#endif  // PLANC_PLUGINS_CONFIG_WATCH_H_
