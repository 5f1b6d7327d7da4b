#include "common/pg_text.h"

#include <gtest/gtest.h>

namespace planc {
namespace {

TEST(PgTextTest, OneLinePerFailure) {
  EXPECT_EQ(pg_one_line("ERROR:  permission denied for table bill\nDETAIL:  x\n"),
            "ERROR:  permission denied for table bill DETAIL:  x");
  EXPECT_EQ(pg_one_line("connection refused\n \n"), "connection refused");
  EXPECT_EQ(pg_one_line(""), "");
}

TEST(PgTextTest, ConnectionStringsAreCheckedBeforeUse) {
  auto kv = check_conninfo("host=/run/postgresql dbname=planc user=planc_exporter");
  EXPECT_TRUE(kv.ok);
  EXPECT_TRUE(kv.names_user);
  auto uri = check_conninfo("postgresql://pcalice@localhost/planc");
  EXPECT_TRUE(uri.ok);
  EXPECT_TRUE(uri.names_user);
  auto nouser = check_conninfo("dbname=planc");
  EXPECT_TRUE(nouser.ok);
  EXPECT_FALSE(nouser.names_user);
  auto bad = check_conninfo("dbname=planc nonsense");
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.error.find("nonsense"), std::string::npos) << bad.error;
  EXPECT_EQ(bad.error.find('\n'), std::string::npos) << bad.error;
  EXPECT_FALSE(check_conninfo("colour=blue").ok);
}

}  // namespace
}  // namespace planc
