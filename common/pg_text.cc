#include "common/pg_text.h"

#include <libpq-fe.h>

#include <cstring>

namespace planc {

std::string pg_one_line(std::string_view message) {
  std::string m(message);
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  for (char& c : m)
    if (c == '\n') c = ' ';
  return m;
}

ConninfoCheck check_conninfo(const std::string& conninfo) {
  ConninfoCheck out;
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
  if (!opts) {
    out.error = pg_one_line(err ? err : "not a connection string");
    PQfreemem(err);
    return out;
  }
  out.ok = true;
  for (PQconninfoOption* p = opts; p->keyword; p++)
    if (!std::strcmp(p->keyword, "user") && p->val && *p->val) out.names_user = true;
  PQconninfoFree(opts);
  return out;
}

}  // namespace planc
