// libpq's text as Plan C's tools show it: one line per failure, and the
// connection strings users pass (--db, --database) checked before use.
// In libplanc_pg (libpq, no Slurm header).
#ifndef PLANC_COMMON_PG_TEXT_H_
#define PLANC_COMMON_PG_TEXT_H_

#include <string>
#include <string_view>

namespace planc {

// A libpq or server message on one line: its DETAIL, HINT and CONTEXT
// lines joined with spaces, the trailing newline dropped.  One log line
// per failure, for journald and for the exporter's source_up reason.
std::string pg_one_line(std::string_view message);

// A connection string (key=value or a postgresql:// URI) as libpq reads it.
struct ConninfoCheck {
  bool ok = false;
  std::string error;        // libpq's reason, one line, when !ok
  bool names_user = false;  // it sets `user` itself
};
ConninfoCheck check_conninfo(const std::string& conninfo);

}  // namespace planc

#endif  // PLANC_COMMON_PG_TEXT_H_
