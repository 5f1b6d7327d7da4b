// What one Plan C plugin offers another inside slurmctld.
//
// Slurm loads each plugin with dlopen(RTLD_LOCAL), so plugins cannot link
// against each other.  slurmctld/planc keeps the daily spot-cap counters
// (its sampler thread owns them); job_submit/planc, which refuses
// submissions over the cap, finds slurmctld/planc's exported query function
// at run time with find_spot_used(): it looks for the loaded
// slurmctld_planc.so among the process's objects and takes a reference to
// it (dlopen RTLD_NOLOAD), so the code stays mapped even after Slurm
// unloads the plugin; the function then answers "unknown".
#ifndef PLANC_PLUGINS_PLANC_SHARED_H_
#define PLANC_PLUGINS_PLANC_SHARED_H_

#include <dlfcn.h>
#include <link.h>

#include <cstdint>
#include <cstring>
#include <ctime>
#include <string>

// Card-seconds `account` has used in tier `tier` (0..3) in the spot day
// containing `now`, counting running jobs.  Returns 1 and sets *used when
// known, 0 when slurmctld/planc is not running (not configured, shutting
// down).  Thread-safe, non-blocking (a short mutex, no I/O).
typedef int (*planc_spot_used_fn)(const char* account, int tier, int64_t now, uint64_t* used);
#define PLANC_SPOT_USED_SYMBOL "planc_spot_used_v1"
#define PLANC_SLURMCTLD_OBJECT "slurmctld_planc.so"

namespace planc {

// The query function of the loaded slurmctld/planc, or nullptr when it is
// not loaded.  Walks the loaded objects (no file I/O).
inline planc_spot_used_fn find_spot_used() {
  std::string path;
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* arg) {
        const char* name = info->dlpi_name;
        size_t n = name ? std::strlen(name) : 0, m = std::strlen("/" PLANC_SLURMCTLD_OBJECT);
        if (n < m || std::strcmp(name + n - m, "/" PLANC_SLURMCTLD_OBJECT)) return 0;
        *static_cast<std::string*>(arg) = name;
        return 1;
      },
      &path);
  if (path.empty()) return nullptr;
  void* handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (!handle) return nullptr;
  // The reference is kept on purpose (see above).
  return reinterpret_cast<planc_spot_used_fn>(dlsym(handle, PLANC_SPOT_USED_SYMBOL));
}

}  // namespace planc

#endif  // PLANC_PLUGINS_PLANC_SHARED_H_
