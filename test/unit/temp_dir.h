// Test helper: a fresh directory under /tmp, removed with everything in it
// when the TempDir goes out of scope.
#ifndef PLANC_TEST_UNIT_TEMP_DIR_H_
#define PLANC_TEST_UNIT_TEMP_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace planc {

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/planc-test.XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path;
};

}  // namespace planc

#endif  // PLANC_TEST_UNIT_TEMP_DIR_H_
