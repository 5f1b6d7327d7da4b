// Locks whose rules the compiler checks.
//
// Every piece of state a Plan C plugin shares between threads is declared
// GUARDED_BY the Mutex that protects it, and functions that expect a lock
// held say REQUIRES, those that take it EXCLUDES.  (ACQUIRE and RELEASE
// carry _CAPABILITY: Slurm's config.h defines RELEASE.)  Built with clang and
// -Wthread-safety (test/thread-safety-build, run by test/run-all), an
// access without the lock is a compile error; other compilers ignore the
// annotations.  std::mutex carries no annotations, hence this wrapper
// (the same shape as abseil's and LLVM's).
//
// Condition variables: std::condition_variable_any over a MutexLock, and
// loops that test their condition in the function that holds the lock
// (a predicate lambda is analysed without the caller's lock).
#ifndef PLANC_PLUGINS_MUTEX_H_
#define PLANC_PLUGINS_MUTEX_H_

#include <mutex>

#if defined(__clang__)
#define PLANC_TSA(x) __attribute__((x))
#else
#define PLANC_TSA(x)
#endif

#define CAPABILITY(x) PLANC_TSA(capability(x))
#define SCOPED_CAPABILITY PLANC_TSA(scoped_lockable)
#define GUARDED_BY(x) PLANC_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) PLANC_TSA(pt_guarded_by(x))
#define REQUIRES(...) PLANC_TSA(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) PLANC_TSA(locks_excluded(__VA_ARGS__))
#define ACQUIRE_CAPABILITY(...) PLANC_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE_CAPABILITY(...) PLANC_TSA(release_capability(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS PLANC_TSA(no_thread_safety_analysis)

namespace planc {

class CAPABILITY("mutex") Mutex {
 public:
  void lock() ACQUIRE_CAPABILITY() { mu_.lock(); }
  void unlock() RELEASE_CAPABILITY() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope; unlock() and lock() let a worker drop it
// around a call into Slurm or any I/O, and condition_variable_any wait on
// it.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE_CAPABILITY(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() RELEASE_CAPABILITY() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void unlock() RELEASE_CAPABILITY() {
    mu_.unlock();
    held_ = false;
  }
  void lock() ACQUIRE_CAPABILITY() {
    mu_.lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

}  // namespace planc

#endif  // PLANC_PLUGINS_MUTEX_H_
