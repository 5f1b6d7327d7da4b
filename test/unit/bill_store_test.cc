// What the bill store's errors mean to the spool: PostgreSQL's SQLSTATE
// classes sorted into retry, set aside, or an admin must act.
#include "common/bill_store.h"

#include <gtest/gtest.h>

namespace planc {
namespace {

TEST(BillStoreTest, SqlstateDecidesTheCode) {
  struct Case {
    const char* sqlstate;
    const char* what;
    ErrorCode code;
  };
  const Case cases[] = {
      {"", "no answer (connection lost)", ErrorCode::kRetryable},
      {"08006", "connection failure", ErrorCode::kRetryable},
      {"40001", "serialization failure", ErrorCode::kRetryable},
      {"40P01", "deadlock", ErrorCode::kRetryable},
      {"53100", "disk full on the server", ErrorCode::kRetryable},
      {"57014", "statement timeout", ErrorCode::kRetryable},
      {"57P01", "admin shutdown", ErrorCode::kRetryable},
      {"58030", "I/O error on the server", ErrorCode::kRetryable},
      {"22021", "invalid byte sequence", ErrorCode::kRefused},
      {"22P02", "invalid text representation", ErrorCode::kRefused},
      {"23514", "check constraint", ErrorCode::kRefused},
      {"23502", "not null", ErrorCode::kRefused},
      {"42703", "undefined column (migration not applied)", ErrorCode::kInvalid},
      {"42501", "insufficient privilege", ErrorCode::kInvalid},
      {"3D000", "no such database", ErrorCode::kInvalid},
  };
  for (const Case& c : cases)
    EXPECT_EQ(error_code_of_sqlstate(c.sqlstate), c.code) << c.sqlstate << " " << c.what;
}

}  // namespace
}  // namespace planc
