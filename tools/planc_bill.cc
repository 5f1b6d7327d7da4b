// planc-bill: read Plan C bills, reconcile them with slurmdbd, manage who
// may read them.  Talks to PostgreSQL as the user who runs it (row-level
// security decides what that user sees), to slurmdbd through libslurmdb
// (tools/slurmdbd_runs.h), and to sacctmgr for the role list.
#include <getopt.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/bill_store.h"
#include "common/billing.h"
#include "common/config.h"
#include "common/market.h"
#include "common/pg_text.h"
#include "common/run_journal.h"
#include "common/tres_usage.h"
#include "planc_config.h"  // PACKAGE_VERSION
#include "tools/run_command.h"
#include "tools/slurmdbd_runs.h"

namespace {

const char* kUsage =
    "usage: planc-bill [--db CONNINFO] [COMMAND] [options]\n"
    "\n"
    "  list      [-S START] [-E END] [-u USER] [-A ACCOUNT] [-j JOBID] [-a] [-o FIELDS]\n"
    "            one line per bill (run segment); the command when none is named\n"
    "            (planc-bill -P -n -o JobID,Tier,Amount); -e lists the fields; your\n"
    "            own bills unless -u, -A, -j or -a (--allusers: all you may read)\n"
    "  report    [-S START] [-E END] [-u USER] [-A ACCOUNT] [--by KEYS]\n"
    "            totals from the hourly table; KEYS: any of account,user,tier,day,hour\n"
    "            (comma-separated; default account,user,tier)\n"
    "  report --efficiency [-S START] [-E END] [-u USER] [-A ACCOUNT]\n"
    "            per account and user, over the bills `measure` has measured: allocated\n"
    "            core-hours against used CPU hours (slurmdbd's TotalCPU of the steps), and\n"
    "            allocated memory GiB-hours against peak-memory GiB-hours (each run's\n"
    "            MaxRSS held for its whole billed time: an upper bound of what it used)\n"
    "  measure   [-S START] [-E END] [--settle SECONDS]\n"
    "            fills the measured-usage columns of bills in the window (default: the\n"
    "            last 7 days) not measured yet, from their runs' steps in slurmdbd (read\n"
    "            through libslurmdb), as the writer role run by SlurmUser (e.g. from\n"
    "            planc-bill-measure.timer).  A run slurmdbd has no end for\n"
    "            yet is left for a later run; one whose steps lack accounting data is\n"
    "            waited for until SECONDS after its end (default 300), then marked\n"
    "            measured with no usage (NULL).  Safe to run again\n"
    "  reconcile -S START -E END [--fill] [--planc-conf FILE] [--journal DIR]\n"
    "            compares slurmdbd's run segments (every run of every job, read\n"
    "            through libslurmdb) with the bills;\n"
    "            --fill writes a bill for each missing one (as the writer role,\n"
    "            e.g. --db 'dbname=planc user=slurm' run by SlurmUser);\n"
    "            then lists run starts in slurmctld/planc's journal (default\n"
    "            StateSaveLocation/planc_starts) known to neither\n"
    "            exit 3: something is missing or unrecorded\n"
    "  rollup\n"
    "            adds the hours of the bills stored since the last time to the hourly\n"
    "            totals (report reads them), as the writer role; jobcomp/planc does it\n"
    "            after every batch it stores, reconcile --fill after its bills: for\n"
    "            bills stored while slurmctld is down, or before a month is detached\n"
    "  market    [--json]\n"
    "            the P2 spot market as slurmctld/planc shows it (scontrol show\n"
    "            config): the floor per GPU type against the list price, the\n"
    "            vacancy behind it, the last and next round; no database\n"
    "  market history [-S START] [-E END]\n"
    "            the market's rounds (planc.market_round, public to every user):\n"
    "            time, GPU type, GPUs offered, vacancy, floor, list and clearing\n"
    "            price per card-hour, bids and winners; default: the last 24 h\n"
    "  market bids [-S START] [-E END] [-u USER] [-A ACCOUNT]\n"
    "            the bids in those rounds you may see (your own; a coordinator's\n"
    "            accounts'; an admin all): job, bid, GPUs, outcome, price paid\n"
    "  columns\n"
    "            planc.bill's columns as this release writes and reads them\n"
    "            (what the migrations in sql/ must have created)\n"
    "  sync-roles [--writer ROLE] [--metrics ROLE] [--dry-run]\n"
    "            creates a PostgreSQL login role for every Slurm user (planc_reader),\n"
    "            admins (planc_admin), the writer (slurmctld's user, planc_writer),\n"
    "            planc-exporter's role (planc_metrics: billed totals per account and\n"
    "            tier, no bill) and the account coordinator list, from sacctmgr\n"
    "            (database superuser)\n"
    "\n"
    "Output, as sacct (every command that prints a table):\n"
    "  -o, --format FIELDS  the columns, comma-separated, in that order (any case)\n"
    "  -n, --noheader       no header line\n"
    "  -p, --parsable       '|' after every field;  -P, --parsable2: between fields\n"
    "  --delimiter CHARS    instead of '|' with -p or -P\n"
    "  --csv                RFC 4180 CSV;  --json: an array of objects, typed\n"
    "  -e, --helpformat     the fields list can show\n"
    "  --utc                times in UTC (default: the local time zone, as sacct)\n"
    "  -V, --version        planc-bill's version\n"
    "\n"
    "Times: 2026-11-30, 2026-11-30T13:00[:00] (local, or UTC with --utc), or\n"
    "seconds since the epoch.  JOBID: 7, 7_3 (an array task; 7 is the whole\n"
    "array), 7+1 (a heterogeneous job's component).\n"
    "--db defaults to $PLANC_BILL_DB, else libpq's PG* environment.\n"
    "Exit status: 0 done, 1 failed (database, Slurm), 2 a usage error, 3 reconcile\n"
    "found something missing.\n";

[[noreturn]] void die(const std::string& msg) {
  std::cerr << "planc-bill: " << msg << "\n";
  std::exit(1);
}

// A usage error: what was wrong and what to do, exit 2.
[[noreturn]] void usage_error(const std::string& msg) {
  std::cerr << "planc-bill: " << msg << "\n(planc-bill --help shows the usage)\n";
  std::exit(2);
}

// A time given on the command line, in the local time zone (or UTC).
int64_t parse_time(const std::string& s, const char* opt, bool utc) {
  if (!s.empty() && s.size() < 19 && s.find_first_not_of("0123456789") == std::string::npos)
    return std::stoll(s);
  for (const char* f : {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"}) {
    struct tm tm = {};
    const char* end = strptime(s.c_str(), f, &tm);
    if (!end || *end) continue;
    tm.tm_isdst = -1;
    return utc ? timegm(&tm) : mktime(&tm);
  }
  usage_error(std::string(opt) + " '" + s + "' is not a time: use 2026-11-30, 2026-11-30T13:00 or" +
              " epoch seconds (" + (utc ? "UTC" : "local time; --utc for UTC") + ")");
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

// The local time zone's name as PostgreSQL knows it, for grouping by day:
// TZ, else the zone /etc/localtime links to, else /etc/timezone; UTC when
// none is set (glibc's default).  Empty: set but not a zone name.
std::string local_zone_name() {
  if (const char* tz = std::getenv("TZ")) {
    std::string z = tz;
    if (!z.empty() && z[0] == ':') z.erase(0, 1);
    if (z.empty()) return "UTC";
    if (z[0] != '/') return z;
    size_t at = z.find("zoneinfo/");
    return at == std::string::npos ? "" : z.substr(at + 9);
  }
  char buf[4096];
  ssize_t n = readlink("/etc/localtime", buf, sizeof buf - 1);
  if (n > 0) {
    std::string link(buf, static_cast<size_t>(n));
    size_t at = link.find("zoneinfo/");
    if (at != std::string::npos) return link.substr(at + 9);
  }
  std::ifstream f("/etc/timezone");
  std::string z;
  if (f >> z) return z;
  return access("/etc/localtime", F_OK) == 0 ? "" : "UTC";
}

// --- output ----------------------------------------------------------------------

enum class Mode { kTable, kParsable, kParsable2, kCsv, kJson };

struct Output {
  Mode mode = Mode::kTable;
  bool header = true;
  bool utc = false;
  std::string delimiter = "|";
  std::vector<std::string> fields;  // -o; empty: the command's default columns
};

using planc::ListType;

// A table a command prints: its columns, their types, and the rows' text
// (numbers as decimal text, "" for none; times as unix seconds).
struct Table {
  std::vector<std::string> cols;
  std::vector<ListType> types;
  std::vector<bool> shown;  // the columns printed when -o names none
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> total;  // table mode's TOTAL line, if any

  void add(std::string name, ListType type, bool by_default = true) {
    cols.push_back(std::move(name));
    types.push_back(type);
    shown.push_back(by_default);
  }
};

std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string o = "\"";
  for (char c : v) {
    if (c == '"') o += '"';
    o += c;
  }
  return o + "\"";
}

// Display width of UTF-8 text (one column per code point; enough for
// names and the CJK-free columns this tool prints).
size_t width(const std::string& s) {
  size_t w = 0;
  for (unsigned char c : s) w += (c & 0xc0) != 0x80;
  return w;
}

// "2026-11-30T13:00:00" as sacct shows times (local, or UTC), or with the
// zone's offset for JSON ("...+08:00", "...Z").
std::string show_time(const std::string& unix_text, bool utc, bool with_offset) {
  if (unix_text.empty()) return "";
  time_t t = static_cast<time_t>(std::stoll(unix_text));
  struct tm tm = {};
  if (utc)
    gmtime_r(&t, &tm);
  else
    localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out = buf;
  if (!with_offset) return out;
  if (utc || tm.tm_gmtoff == 0) return out + "Z";
  long off = tm.tm_gmtoff;
  char z[32];
  std::snprintf(z, sizeof z, "%c%02ld:%02ld", off < 0 ? '-' : '+', std::labs(off) / 3600,
                std::labs(off) % 3600 / 60);
  return out + z;
}

// A number column's text as a JSON value: an integer, a decimal, null for
// none; a word a number column may hold ("none", "list") stays text.
nlohmann::ordered_json json_number(const std::string& v) {
  if (v.empty()) return nullptr;
  int64_t i = 0;
  auto r = std::from_chars(v.data(), v.data() + v.size(), i);
  if (r.ec == std::errc() && r.ptr == v.data() + v.size()) return i;
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (end == v.c_str() + v.size()) return d;
  return v;
}

// The columns -o names (any case), in its order; each must exist.
std::vector<size_t> pick_columns(const Table& t, const Output& out) {
  std::vector<size_t> pick;
  if (out.fields.empty()) {
    for (size_t j = 0; j < t.cols.size(); j++)
      if (t.shown[j]) pick.push_back(j);
    return pick;
  }
  for (const std::string& f : out.fields) {
    size_t j = 0;
    while (j < t.cols.size() && !planc::iequals(t.cols[j], f)) j++;
    if (j == t.cols.size()) {
      std::string valid;
      for (const std::string& c : t.cols) valid += (valid.empty() ? "" : ",") + c;
      usage_error("-o: no field '" + f + "' here; the fields are " + valid);
    }
    pick.push_back(j);
  }
  return pick;
}

void print(const Table& t, const Output& out) {
  const std::vector<size_t> pick = pick_columns(t, out);
  auto cell = [&](const std::vector<std::string>& row, size_t j) {
    return t.types[j] == ListType::kTime ? show_time(row[j], out.utc, out.mode == Mode::kJson)
                                         : row[j];
  };
  switch (out.mode) {
    case Mode::kJson: {
      nlohmann::ordered_json all = nlohmann::ordered_json::array();
      for (const auto& row : t.rows) {
        nlohmann::ordered_json o = nlohmann::ordered_json::object();
        for (size_t j : pick)
          o[t.cols[j]] = t.types[j] == ListType::kNumber ? json_number(row[j])
                                                         : nlohmann::ordered_json(cell(row, j));
        all.push_back(std::move(o));
      }
      // Text Slurm took as any bytes: invalid UTF-8 shows as U+FFFD.
      std::cout << all.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      return;
    }
    case Mode::kCsv:
    case Mode::kParsable:
    case Mode::kParsable2: {
      const bool csv = out.mode == Mode::kCsv;
      const std::string sep = csv ? "," : out.delimiter;
      auto line = [&](auto text_of) {
        std::string s;
        for (size_t k = 0; k < pick.size(); k++) {
          std::string v = text_of(pick[k]);
          s += (k ? sep : "") + (csv ? csv_field(v) : v);
        }
        if (out.mode == Mode::kParsable) s += sep;
        std::cout << s << "\n";
      };
      if (out.header) line([&](size_t j) { return t.cols[j]; });
      for (const auto& row : t.rows) line([&](size_t j) { return cell(row, j); });
      return;
    }
    case Mode::kTable: {
      std::vector<std::vector<std::string>> lines;
      for (const auto& row : t.rows) {
        std::vector<std::string> l;
        for (size_t j : pick) l.push_back(cell(row, j));
        lines.push_back(std::move(l));
      }
      if (!t.total.empty() && out.fields.empty()) {
        std::vector<std::string> l;
        for (size_t j : pick) l.push_back(t.total[j]);
        lines.push_back(std::move(l));
      }
      std::vector<size_t> w(pick.size());
      for (size_t k = 0; k < pick.size(); k++) w[k] = out.header ? width(t.cols[pick[k]]) : 0;
      for (const auto& l : lines)
        for (size_t k = 0; k < l.size(); k++) w[k] = std::max(w[k], width(l[k]));
      auto emit = [&](const std::vector<std::string>& l) {
        std::string s;
        for (size_t k = 0; k < l.size(); k++) {
          std::string pad(w[k] - width(l[k]), ' ');
          s += (k ? " " : "") + (t.types[pick[k]] == ListType::kNumber ? pad + l[k] : l[k] + pad);
        }
        while (!s.empty() && s.back() == ' ') s.pop_back();
        std::cout << s << "\n";
      };
      if (out.header) {
        std::vector<std::string> h, dashes;
        for (size_t k = 0; k < pick.size(); k++) {
          h.push_back(t.cols[pick[k]]);
          dashes.emplace_back(w[k], '-');
        }
        emit(h);
        emit(dashes);
      }
      for (const auto& l : lines) emit(l);
      return;
    }
  }
}

// --- options -----------------------------------------------------------------------

// A job id as sacct takes it: 7, 7_3 (an array task), 7+1 (a
// heterogeneous job's component).
struct JobSpec {
  uint32_t id = 0;
  std::optional<uint32_t> array_task, het_offset;
};

JobSpec parse_job(const std::string& s) {
  auto number = [&](std::string_view v, uint32_t* out) {
    auto r = std::from_chars(v.data(), v.data() + v.size(), *out);
    return !v.empty() && r.ec == std::errc() && r.ptr == v.data() + v.size();
  };
  JobSpec j;
  std::string_view v = s;
  size_t sep = v.find_first_of("_+.");
  uint32_t second = 0;
  if (!number(v.substr(0, sep), &j.id) ||
      (sep != std::string_view::npos && (v[sep] == '.' || !number(v.substr(sep + 1), &second))))
    usage_error("-j '" + s + "' is not a job id: use 7, 7_3 (an array task) or 7+1 (a" +
                " heterogeneous job's component), comma-separated; bills are per run, not" +
                " per step");
  if (sep != std::string_view::npos) (v[sep] == '_' ? j.array_task : j.het_offset) = second;
  return j;
}

struct Options {
  std::string db;
  std::string start_text, end_text;
  int64_t start = 0, end = 0;
  std::vector<std::string> users, accounts, by;
  std::vector<JobSpec> jobs;
  Output out;
  bool help_format = false;
  bool fill = false;
  std::string planc_conf;
  std::string journal;
  std::string writer;
  std::string metrics;   // sync-roles --metrics: planc-exporter's role
  bool dry_run = false;  // sync-roles --dry-run: say what would change
  bool efficiency = false;
  bool all_users = false;  // -a: list every bill this role may read
  int64_t settle = 300;
};

enum LongOnly { kCsvOpt = 1000, kJsonOpt, kUtcOpt, kDelimiterOpt };

Options parse_options(int argc, char** argv) {
  Options o;
  if (const char* db = std::getenv("PLANC_BILL_DB")) o.db = db;
  static const option longopts[] = {{"db", required_argument, nullptr, 'd'},
                                    {"starttime", required_argument, nullptr, 'S'},
                                    {"endtime", required_argument, nullptr, 'E'},
                                    {"user", required_argument, nullptr, 'u'},
                                    {"allusers", no_argument, nullptr, 'a'},
                                    {"account", required_argument, nullptr, 'A'},
                                    {"jobs", required_argument, nullptr, 'j'},
                                    {"format", required_argument, nullptr, 'o'},
                                    {"noheader", no_argument, nullptr, 'n'},
                                    {"parsable", no_argument, nullptr, 'p'},
                                    {"parsable2", no_argument, nullptr, 'P'},
                                    {"delimiter", required_argument, nullptr, kDelimiterOpt},
                                    {"csv", no_argument, nullptr, kCsvOpt},
                                    {"json", no_argument, nullptr, kJsonOpt},
                                    {"utc", no_argument, nullptr, kUtcOpt},
                                    {"helpformat", no_argument, nullptr, 'e'},
                                    {"version", no_argument, nullptr, 'V'},
                                    {"by", required_argument, nullptr, 'b'},
                                    {"fill", no_argument, nullptr, 'F'},
                                    {"planc-conf", required_argument, nullptr, 'c'},
                                    {"writer", required_argument, nullptr, 'w'},
                                    {"help", no_argument, nullptr, 'h'},
                                    {"journal", required_argument, nullptr, 'J'},
                                    {"efficiency", no_argument, nullptr, 'x'},
                                    {"settle", required_argument, nullptr, 's'},
                                    {"metrics", required_argument, nullptr, 'M'},
                                    {"dry-run", no_argument, nullptr, 'N'},
                                    {nullptr, 0, nullptr, 0}};
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":d:S:E:u:aA:j:o:b:npPehV", longopts, nullptr)) != -1) {
    switch (c) {
      case 'd':
        o.db = optarg;
        break;
      case 'S':
        o.start_text = optarg;
        break;
      case 'E':
        o.end_text = optarg;
        break;
      case 'u':
        for (auto& s : split(optarg, ',')) o.users.push_back(s);
        break;
      case 'a':
        o.all_users = true;
        break;
      case 'A':
        for (auto& s : split(optarg, ',')) o.accounts.push_back(s);
        break;
      case 'j':
        for (auto& s : split(optarg, ',')) o.jobs.push_back(parse_job(s));
        break;
      case 'o': {
        // The output modes' names, as --format took them before it took
        // sacct's field list, are still understood.
        if (planc::iequals(optarg, "table"))
          o.out.mode = Mode::kTable;
        else if (planc::iequals(optarg, "csv"))
          o.out.mode = Mode::kCsv;
        else if (planc::iequals(optarg, "json"))
          o.out.mode = Mode::kJson;
        else
          for (auto& f : split(optarg, ','))
            if (!f.empty()) o.out.fields.push_back(f);
        break;
      }
      case 'n':
        o.out.header = false;
        break;
      case 'p':
        o.out.mode = Mode::kParsable;
        break;
      case 'P':
        o.out.mode = Mode::kParsable2;
        break;
      case kDelimiterOpt:
        if (!*optarg) usage_error("--delimiter needs at least one character");
        o.out.delimiter = optarg;
        break;
      case kCsvOpt:
        o.out.mode = Mode::kCsv;
        break;
      case kJsonOpt:
        o.out.mode = Mode::kJson;
        break;
      case kUtcOpt:
        o.out.utc = true;
        break;
      case 'e':
        o.help_format = true;
        break;
      case 'V':
        std::cout << "planc-bill " << PACKAGE_VERSION << "\n";
        std::exit(0);
      case 'b':
        o.by = split(optarg, ',');
        break;
      case 'F':
        o.fill = true;
        break;
      case 'c':
        o.planc_conf = optarg;
        break;
      case 'w':
        o.writer = optarg;
        break;
      case 'M':
        o.metrics = optarg;
        break;
      case 'J':
        o.journal = optarg;
        break;
      case 'x':
        o.efficiency = true;
        break;
      case 's': {
        std::string v = optarg;
        if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos)
          usage_error("--settle '" + v + "' is not a number of seconds");
        o.settle = std::stoll(v);
        break;
      }
      case 'N':
        o.dry_run = true;
        break;
      case 'h':
        std::cout << kUsage;
        std::exit(0);
      case ':':
        usage_error(optopt
                        ? std::string("option '-") + static_cast<char>(optopt) + "' needs a value"
                        : std::string("option '") + argv[optind - 1] + "' needs a value");
      default:
        usage_error(optopt ? std::string("unknown option '-") + static_cast<char>(optopt) + "'"
                           : std::string("unknown option '") + argv[optind - 1] + "'");
    }
  }
  if (optind < argc) usage_error(std::string("unexpected argument '") + argv[optind] + "'");
  if (!o.start_text.empty()) o.start = parse_time(o.start_text, "-S", o.out.utc);
  if (!o.end_text.empty()) o.end = parse_time(o.end_text, "-E", o.out.utc);
  return o;
}

// --- list ----------------------------------------------------------------------------

// Every field list can show, in the table's order (common/bill_schema.h).
std::vector<const planc::BillColumn*> listed_columns() {
  std::vector<const planc::BillColumn*> out;
  for (const planc::BillColumn& c : planc::bill_columns())
    if (c.list_label) out.push_back(&c);
  return out;
}

int cmd_help_format() {
  // As sacct -e: the names, several to a line.
  std::string line;
  for (const planc::BillColumn* c : listed_columns()) {
    std::string f = c->list_label;
    f.resize(std::max<size_t>(f.size() + 1, 16), ' ');
    if (line.size() + f.size() > 80) {
      std::cout << line << "\n";
      line.clear();
    }
    line += f;
  }
  std::cout << line << "\n";
  return 0;
}

int cmd_list(planc::BillStore& store, const Options& o) {
  planc::BillFilter f;
  f.users = o.users;
  // As sacct: a user who names no user, account or job sees their own bills
  // (a coordinator's accounts' with -A or -a); root sees every bill.  Also
  // what keeps the query on the user's index: without it PostgreSQL reads
  // the window's every bill to ask row-level security about each.
  if (f.users.empty() && o.accounts.empty() && o.jobs.empty() && !o.all_users && getuid() != 0)
    if (const passwd* pw = getpwuid(getuid())) f.users.push_back(pw->pw_name);
  f.accounts = o.accounts;
  f.whole_jobs = true;
  for (const JobSpec& j : o.jobs) {
    if (j.array_task)
      f.array_tasks.emplace_back(j.id, *j.array_task);
    else if (j.het_offset)
      f.het_components.emplace_back(j.id, *j.het_offset);
    else
      f.job_ids.push_back(j.id);
  }
  f.start = o.start;
  f.end = o.end;
  auto r = store.query(f);
  if (!r.ok()) die(r.error());
  // Amount is the bill's exact amount (micro-units, 6 decimals): bills are
  // summed exactly and rounded per invoice line (see report).
  const auto listed = listed_columns();
  Table t;
  for (const planc::BillColumn* c : listed)
    t.add(c->list_label, planc::column_list_type(*c), c->list_default);
  for (const planc::Bill& b : r.value()) {
    std::vector<std::string> row;
    for (const planc::BillColumn* c : listed) row.push_back(planc::show_column(*c, b));
    t.rows.push_back(std::move(row));
  }
  print(t, o.out);
  return 0;
}

// --- columns -----------------------------------------------------------------

// planc.bill's columns as Plan C writes and reads them (the column table,
// common/bill_schema.h), as information_schema.columns names them: what the
// migrations must create.  Needs no database.
int cmd_columns(const Options& o) {
  Table t;
  for (const char* c : {"Column", "Type", "Nullable"}) t.add(c, ListType::kText);
  for (const planc::BillColumn& c : planc::bill_columns())
    if (c.in_table()) t.rows.push_back({c.name, c.sql_type, c.nullable ? "YES" : "NO"});
  print(t, o.out);
  return 0;
}

// The --user and --account filters of a query (parameterised), as
// " AND user_name = ANY($n::text[])" clauses appended to `*sql`.
void add_user_account_filters(const Options& o, std::string* sql,
                              std::vector<std::string>* params) {
  for (const auto& [column, v] :
       {std::pair<const char*, const std::vector<std::string>*>{"user_name", &o.users},
        {"account", &o.accounts}}) {
    if (v->empty()) continue;
    params->push_back(planc::pg_text_array(*v));
    *sql +=
        std::string(" AND ") + column + " = ANY($" + std::to_string(params->size()) + "::text[])";
  }
}

// --- report ----------------------------------------------------------------------------

int cmd_report(planc::BillStore& store, const Options& o) {
  std::vector<std::string> by =
      o.by.empty() ? std::vector<std::string>{"account", "user", "tier"} : o.by;
  std::string select, group;
  std::vector<std::string> params;
  Table t;
  for (const std::string& k : by) {
    std::string expr, name;
    ListType type = ListType::kText;
    if (k == "account") {
      expr = "account", name = "Account";
    } else if (k == "user") {
      expr = "user_name", name = "User";
    } else if (k == "tier") {
      expr = "tier", name = "Tier";
    } else if (k == "day") {
      // The reader's day (or UTC's with --utc): PostgreSQL needs the zone's name.
      std::string zone = o.out.utc ? "UTC" : local_zone_name();
      if (zone.empty())
        usage_error(
            "--by day: cannot tell the local time zone's name (TZ or /etc/localtime): set TZ, "
            "e.g. TZ=Asia/Shanghai, or use --utc");
      params.push_back(zone);
      expr = "to_char(hour AT TIME ZONE $" + std::to_string(params.size()) + ", 'YYYY-MM-DD')";
      name = "Day";
    } else if (k == "hour") {
      expr = "extract(epoch FROM hour)::bigint", name = "Hour", type = ListType::kTime;
    } else {
      usage_error("--by '" + k + "': use account, user, tier, day or hour");
    }
    select += expr + ", ";
    group += (group.empty() ? "" : ", ") + expr;
    t.add(name, type);
  }
  // Each printed line is one invoice line: its hours' exact micro-unit
  // amounts are summed, then rounded once, half up, to minor units.  TOTAL
  // is the sum of the printed lines.
  std::string sql =
      "SELECT " + select +
      "sum(segments), round(sum(card_seconds) / 3600, 3), round(sum(core_seconds) / 3600.0, 3),"
      " round(sum(mem_gib_seconds) / 3600, 3), sum(amount_micros)"
      " FROM planc.usage_hourly WHERE true";
  add_user_account_filters(o, &sql, &params);
  // Hours are whole: a start inside an hour includes that hour.
  if (o.start) {
    params.push_back(planc::pg_timestamp(o.start - o.start % 3600));
    sql += " AND hour >= $" + std::to_string(params.size()) + "::timestamptz";
  }
  if (o.end) {
    params.push_back(planc::pg_timestamp(o.end));
    sql += " AND hour < $" + std::to_string(params.size()) + "::timestamptz";
  }
  if (!group.empty()) sql += " GROUP BY " + group + " ORDER BY " + group;
  auto r = store.rows(sql, params);
  if (!r.ok()) {
    if (r.error().find("time zone") != std::string::npos)
      usage_error(r.error() + " (set TZ to a zone name, e.g. TZ=Asia/Shanghai, or use --utc)");
    die(r.error());
  }
  for (const char* c :
       {"Segments", "CardHours", "CoreHours", "MemGiBHours", "AmountExact", "Amount"})
    t.add(c, ListType::kNumber);
  t.rows = r.value();
  int64_t total_minor = 0, total_micros = 0;
  for (auto& row : t.rows) {
    int64_t micros = std::strtoll(row.back().c_str(), nullptr, 10);
    int64_t minor = planc::minor_of_micros(micros);
    total_micros += micros;
    total_minor += minor;
    row.back() = planc::format_micros6(micros);
    row.push_back(planc::format_minor(minor));
  }
  if (!by.empty()) {
    t.total.assign(t.cols.size(), "");
    t.total[0] = "TOTAL";
    t.total[t.total.size() - 2] = planc::format_micros6(total_micros);
    t.total.back() = planc::format_minor(total_minor);
  }
  print(t, o.out);
  return 0;
}

// --- report --efficiency ----------------------------------------------------------------

// From planc.bill, so row-level security applies (a user sees their own
// bills), over the bills whose usage was measured (used_cpu_seconds set):
// both sides of a ratio cover the same runs.  Peak-memory GiB-hours: each
// bill's MaxRSS in GiB times its billed hours, summed.
int cmd_report_efficiency(planc::BillStore& store, const Options& o) {
  if (!o.by.empty()) usage_error("--efficiency reports per account and user: leave out --by");
  const std::string alloc_core = "sum(core_seconds) FILTER (WHERE used_cpu_seconds IS NOT NULL)";
  const std::string alloc_mem = "sum(mem_gib_seconds) FILTER (WHERE max_rss_bytes IS NOT NULL)";
  const std::string peak = "sum(max_rss_bytes::numeric / 1073741824 * billable_seconds)";
  std::string sql = "SELECT account, user_name, count(*), count(used_cpu_seconds), round(" +
                    alloc_core + " / 3600.0, 6), round(sum(used_cpu_seconds) / 3600, 6)," +
                    " round(100 * sum(used_cpu_seconds) / nullif(" + alloc_core + ", 0), 1)," +
                    " round(" + alloc_mem + " / 3600, 6), round(" + peak + " / 3600, 6)," +
                    " round(100 * " + peak + " / nullif(" + alloc_mem + ", 0), 1)" +
                    " FROM planc.bill WHERE true";
  std::vector<std::string> params;
  add_user_account_filters(o, &sql, &params);
  // As list: the runs that overlap the window.
  if (o.start) {
    params.push_back(planc::pg_timestamp(o.start));
    sql += " AND end_time >= $" + std::to_string(params.size()) + "::timestamptz";
  }
  if (o.end) {
    params.push_back(planc::pg_timestamp(o.end));
    sql += " AND start_time <= $" + std::to_string(params.size()) + "::timestamptz";
  }
  sql += " GROUP BY account, user_name ORDER BY account, user_name";
  auto r = store.rows(sql, params);
  if (!r.ok()) die(r.error());
  Table t;
  t.add("Account", ListType::kText);
  t.add("User", ListType::kText);
  for (const char* c : {"Bills", "Measured", "AllocCoreHours", "UsedCoreHours", "CPUPercent",
                        "AllocMemGiBHours", "PeakMemGiBHours", "MemPercent"})
    t.add(c, ListType::kNumber);
  t.rows = r.value();
  print(t, o.out);
  return 0;
}

// --- measure ----------------------------------------------------------------------------

// Fills the measured-usage track (common/tres_usage.h) of bills not
// measured yet, from their runs' steps in slurmdbd, matched by the bill key
// (cluster, job id, start time) as reconcile matches.  Writes only the
// measured columns, each bill once (the UPDATE requires measured_at IS
// NULL): a timer may run it as often as it likes.
int cmd_measure(planc::BillStore& store, const Options& o) {
  const int64_t now = time(nullptr);
  const int64_t start = o.start ? o.start : now - 7 * 86400, end = o.end ? o.end : now;
  auto site = planc::load_slurm_site();
  if (!site.ok()) die(site.error());
  const std::string& cluster = site.value().cluster;
  planc::BillFilter f;
  f.start = start;
  f.end = end;
  f.unmeasured = true;
  auto have = store.query(f);
  if (!have.ok()) die(have.error());
  std::vector<planc::Bill> todo, done;
  std::set<uint32_t> job_ids;
  int64_t first_start = end;
  size_t never_ran = 0;
  for (planc::Bill& b : have.value()) {
    if (b.seg.cluster != cluster) continue;  // another cluster's measure fills it
    if (b.seg.node_count == 0) {
      // Never held a node (cancelled while pending): nothing ran to measure.
      b.measured_at = now;
      done.push_back(std::move(b));
      never_ran++;
      continue;
    }
    job_ids.insert(b.seg.job_id);
    first_start = std::min(first_start, b.seg.start_time);
    todo.push_back(std::move(b));
  }
  planc::TresNames names;
  std::map<planc::RunKey, planc::DbdRunSteps> runs;
  if (!todo.empty()) {
    auto got = planc::slurmdbd_run_steps(cluster, {job_ids.begin(), job_ids.end()}, first_start,
                                         std::max(end, now), &names);
    if (!got.ok()) die(got.error());
    for (planc::DbdRunSteps& r : got.value()) runs[r.key] = std::move(r);
  }
  size_t not_in_dbd = 0, waiting = 0, no_data = 0, malformed = 0;
  for (planc::Bill& b : todo) {
    auto it = runs.find({b.seg.cluster, b.seg.job_id, b.seg.start_time});
    if (it == runs.end()) {
      not_in_dbd++;  // slurmdbd has no end of this run (yet: or reconcile lists it)
      continue;
    }
    const planc::DbdRunSteps& run = it->second;
    planc::RunUsage u = planc::summarize_steps(run.steps, names);
    malformed += u.malformed;
    // Step records reach slurmdbd on their own: give a step without data
    // time before saying Slurm measured nothing.
    bool complete = u.measured && !u.steps_without_data && !u.unfinished_steps;
    if (!complete && now - run.end_time < o.settle) {
      waiting++;
      continue;
    }
    b.measured_at = now;
    if (u.measured) {
      b.used_cpu_micro_seconds = u.cpu_micro_seconds;
      b.max_rss_bytes = u.max_rss_bytes;
      b.tres_usage_in_tot = u.usage_in_tot;
    } else {
      no_data++;
    }
    done.push_back(std::move(b));
  }
  auto changed = store.record_usage(done);
  if (!changed.ok()) die(changed.error());
  std::cout << "measure " << planc::pg_timestamp(start) << " .. " << planc::pg_timestamp(end)
            << ": " << have.value().size() << " bill(s) not measured, " << changed.value()
            << " measured now (" << no_data << " with no accounting data in slurmdbd, " << never_ran
            << " never ran), " << waiting << " waiting for their steps, " << not_in_dbd
            << " without an ended run in slurmdbd\n";
  if (malformed)
    std::cerr << "planc-bill: " << malformed
              << " TRES usage item(s) slurmdbd returned were not <id>=<count> and were skipped\n";
  return 0;
}

// --- reconcile -------------------------------------------------------------------------

// Runs a command without a shell; returns its stdout (dies when it fails).
std::string run(const std::vector<std::string>& argv) {
  std::string why;
  auto out = planc::tools::run_command(argv, &why);
  if (!out) die(why);
  return *out;
}

// --- market ----------------------------------------------------------------------

// The market as slurmctld/planc shows it, and the expected interruption from
// the bills (planc.p2_runs, migration 0005: aggregates over every user's P2
// runs, which row-level security would hide).  The bills are optional: a
// database that cannot be read is said, the rest still shown.
int cmd_market(const Options& o, const std::string& as_user, const std::string& db_error) {
  if (o.out.mode != Mode::kTable && o.out.mode != Mode::kJson)
    usage_error("market prints a table, or JSON with --json");
  planc::MarketStatus s = planc::parse_market_status(run({"scontrol", "show", "config"}));
  if (s.open) {
    planc::MarketStatus::Interruption i;
    planc::BillStore store(o.db, as_user);
    if (!db_error.empty()) {
      i.error = db_error;
    } else if (auto c = store.connect(); !c.ok()) {
      i.error = c.error();
    } else if (auto r = store.rows("SELECT runs::text, preempted::text, "
                                   "coalesce(mean_run_seconds, 0)::text FROM planc.p2_runs($1)",
                                   {std::to_string(i.window_hours)});
               !r.ok() || r.value().size() != 1 || r.value()[0].size() != 3) {
      i.error = r.ok() ? "planc.p2_runs returned no row" : r.error();
    } else {
      const auto& row = r.value()[0];
      i.runs = std::stoll(row[0]);
      i.preempted = std::stoll(row[1]);
      i.mean_run_seconds = std::stod(row[2]);
    }
    s.interruption = i;
    // The caller's own jobs (squeue shows a user their jobs' AdminComment).
    if (struct passwd* pw = getpwuid(getuid()))
      s.own_jobs = planc::parse_own_market_jobs(run(
          {"squeue", "-h", "-u", pw->pw_name, "-t", "PD,R,CG,S", "-O", planc::own_jobs_format()}));
  }
  std::cout << planc::format_market_status(s, o.out.mode == Mode::kJson);
  return 0;
}

// The recorded rounds (sql/0006), newest first.  Rounds are public; bids
// are read through row-level security like bills.  Prices are micro-units
// per card-hour in the tables, shown in whole currency with two decimals.
constexpr const char* kPrice = "to_char(%s / 1000000.0, 'FM999999990.00')";

std::string price_sql(const char* column) {
  char buf[128];
  std::snprintf(buf, sizeof buf, kPrice, column);
  return buf;
}

void market_window(const Options& o, int64_t* start, int64_t* end) {
  *end = o.end ? o.end : time(nullptr);
  *start = o.start ? o.start : *end - 24 * 3600;
}

int cmd_market_history(planc::BillStore& store, const Options& o) {
  int64_t start, end;
  market_window(o, &start, &end);
  std::string sql =
      "SELECT extract(epoch FROM round_at)::bigint, gpu_type, "
      "capacity_gpus::text, coalesce(to_char(vacancy_permille / 10.0, 'FM990.0') || '%', ''), " +
      price_sql("floor_micros") + ", " + price_sql("list_micros") + ", " + "coalesce(" +
      price_sql("clearing_micros") + ", 'none')" +
      ", bids::text, winners::text FROM planc.market_round"
      " WHERE round_at >= to_timestamp($1::bigint) AND round_at <= to_timestamp($2::bigint)"
      " ORDER BY round_at DESC, gpu_type";
  auto r = store.rows(sql, {std::to_string(start), std::to_string(end)});
  if (!r.ok()) die(r.error() + " (the market's records need migration 0006: run planc-migrate)");
  Table t;
  t.add("Round", ListType::kTime);
  t.add("GPUType", ListType::kText);
  t.add("OfferedGPUs", ListType::kNumber);
  t.add("Vacancy", ListType::kText);
  for (const char* c : {"Floor", "List", "Clearing", "Bids", "Winners"})
    t.add(c, ListType::kNumber);
  t.rows = r.value();
  print(t, o.out);
  return 0;
}

int cmd_market_bids(planc::BillStore& store, const Options& o) {
  int64_t start, end;
  market_window(o, &start, &end);
  std::vector<std::string> params = {std::to_string(start), std::to_string(end)};
  std::string sql =
      "SELECT extract(epoch FROM round_at)::bigint, job_id::text, user_name, account, coalesce(" +
      price_sql("bid_micros") + ", 'list'), gpus::text, outcome, " + price_sql("pays_micros") +
      " FROM planc.market_bid"
      " WHERE round_at >= to_timestamp($1::bigint) AND round_at <= to_timestamp($2::bigint)";
  if (!o.users.empty()) {
    params.push_back(planc::pg_text_array(o.users));
    sql += " AND user_name = ANY($" + std::to_string(params.size()) + "::text[])";
  }
  if (!o.accounts.empty()) {
    params.push_back(planc::pg_text_array(o.accounts));
    sql += " AND account = ANY($" + std::to_string(params.size()) + "::text[])";
  }
  sql += " ORDER BY round_at DESC, job_id";
  auto r = store.rows(sql, params);
  if (!r.ok()) die(r.error() + " (the market's records need migration 0006: run planc-migrate)");
  Table t;
  t.add("Round", ListType::kTime);
  for (const char* c : {"JobID", "User", "Account"}) t.add(c, ListType::kText);
  t.add("Bid", ListType::kNumber);
  t.add("GPUs", ListType::kNumber);
  t.add("Outcome", ListType::kText);
  t.add("Pays", ListType::kNumber);
  t.rows = r.value();
  print(t, o.out);
  return 0;
}

// slurmctld fills in a job's user name lazily: a journal record may carry
// only the uid.
std::string user_name_of(uint32_t uid, const std::string& recorded) {
  if (!recorded.empty()) return recorded;
  if (struct passwd* pw = getpwuid(uid)) return pw->pw_name;
  return std::to_string(uid);
}

// How long after its start a run may still be missing from slurmdbd
// without anything being wrong (slurmctld tells slurmdbd asynchronously).
constexpr int64_t kJournalSettleSeconds = 60;

// The journal's records for [start, end] from the day files in `dir`.  A
// directory that cannot be read is said and skipped: the check of starts
// is then not made.
planc::JournalRead read_journal_dir(const std::string& dir, int64_t start, int64_t end) {
  planc::JournalRead all;
  bool any = false;
  for (const std::string& name : planc::journal_files_for(start, end)) {
    std::ifstream in(dir + "/" + name, std::ios::binary);
    if (!in) continue;
    any = true;
    std::ostringstream text;
    text << in.rdbuf();
    planc::JournalRead r = planc::read_journal(text.str());
    all.damaged += r.damaged;
    for (planc::Segment& s : r.starts)
      if (s.start_time >= start && s.start_time <= end) all.starts.push_back(std::move(s));
  }
  if (!any)
    std::cerr << "planc-bill: no run-start journal for the window in " << dir
              << " (slurmctld/planc writes it; run reconcile on the controller's host, or pass "
                 "--journal DIR): starts unknown to both the bills and slurmdbd are not checked\n";
  return all;
}

// slurmdbd's runs are read through libslurmdb (tools/slurmdbd_runs.h), as
// structured records: a job name is data, never a place where a record
// could end or a field begin.  A run counts as billed when a bill has its
// key (cluster, job id, start time); only runs slurmdbd returned for this
// query are listed or filled.
// Adds the hours of every bill stored since the last time to the hourly
// totals (BillStore::rollup), a batch at a time; says how many.
void roll_up(planc::BillStore& store) {
  size_t bills = 0, rows = 0;
  int64_t last = 0;
  for (;;) {
    auto r = store.rollup(planc::kRollupBillsPerTransaction);
    if (!r.ok()) die("adding bills to the hourly totals: " + r.error());
    bills += r.value().bills;
    rows += r.value().hour_rows;
    last = r.value().last_seq;
    if (!r.value().bills) break;
  }
  if (!store.rolls_up_hours()) {
    std::cout << "rollup: this database adds each bill's hours as it is stored (schema before "
                 "11); nothing to do\n";
    return;
  }
  std::cout << "rollup: " << bills << " bill(s) added to " << rows
            << " hourly row(s); bills are counted up to number " << last << "\n";
}

int cmd_rollup(planc::BillStore& store) {
  roll_up(store);
  return 0;
}

int cmd_reconcile(planc::BillStore& store, const Options& o) {
  if (!o.start || !o.end) usage_error("reconcile needs -S and -E");
  std::string conf = o.planc_conf;
  if (conf.empty()) {
    const char* sc = std::getenv("SLURM_CONF");
    conf = planc::planc_conf_path(sc ? sc : "/etc/slurm/slurm.conf");
  }
  auto cfg = planc::load_config(conf);
  if (!cfg.ok()) die(cfg.error());
  auto site = planc::load_slurm_site();
  if (!site.ok()) die(site.error());
  auto got = planc::slurmdbd_runs(site.value().cluster, o.start, o.end);
  if (!got.ok()) die(got.error());
  std::vector<planc::Bill> runs;
  std::set<uint32_t> job_ids;
  std::set<planc::RunKey> ended;  // runs slurmdbd has to their end
  for (planc::Segment& s : got.value().ended) {
    job_ids.insert(s.job_id);
    ended.insert({s.cluster, s.job_id, s.start_time});
    planc::make_text_valid_utf8(&s);
    planc::Bill b = planc::price_segment(cfg.value(), s);
    b.note += "filled by planc-bill reconcile from slurmdbd; ";
    if (s.job_name.find('?') != std::string::npos)
      b.note +=
          "job name as slurmdbd stored it: slurmdbd keeps a '?' for each character its "
          "database cannot hold (outside Latin-1, e.g. CJK); ";
    runs.push_back(std::move(b));
  }
  // The run-start journal (slurmctld/planc): the starts in the window.
  std::string journal =
      o.journal.empty() ? site.value().state_save_location + "/" + planc::kJournalDir : o.journal;
  planc::JournalRead starts = read_journal_dir(journal, o.start, o.end);
  for (const planc::Segment& r : starts.starts) job_ids.insert(r.job_id);
  // The bills of those jobs, by job id rather than by time: slurmdbd
  // selects jobs eligible in the window, which may have started after it.
  planc::BillFilter f;
  f.job_ids.assign(job_ids.begin(), job_ids.end());
  std::set<planc::RunKey> billed;
  if (!f.job_ids.empty()) {
    auto have = store.query(f);
    if (!have.ok()) die(have.error());
    for (const auto& b : have.value())
      billed.insert({b.seg.cluster, b.seg.job_id, b.seg.start_time});
  }
  std::vector<planc::Bill> missing;
  for (planc::Bill& b : runs)
    if (!billed.count({b.seg.cluster, b.seg.job_id, b.seg.start_time}))
      missing.push_back(std::move(b));
  std::cout << "reconcile " << planc::pg_timestamp(o.start) << " .. " << planc::pg_timestamp(o.end)
            << ": " << runs.size() << " run segment(s) in slurmdbd, " << missing.size()
            << " without a bill\n";
  for (const auto& b : missing)
    std::cout << "  missing: job " << b.seg.job_id << " start "
              << planc::pg_timestamp(b.seg.start_time) << " " << b.seg.state << " user "
              << b.seg.user << " account " << b.seg.account << " amount "
              << planc::format_micros6(b.amount_micros) << "\n";
  if (o.fill && !missing.empty()) {
    auto r = store.write(missing, "reconcile");
    if (!r.ok()) die(r.error());
    std::cout << "filled " << r.value() << " bill(s)\n";
    roll_up(store);
  }
  // Starts no bill, no ended slurmdbd record and no running job accounts
  // for: runs that reached the nodes while the controller that started
  // them was killed before it saved them.  A slurmdbd record with a start
  // and no end of a job slurmctld no longer has is a runaway: its end is
  // not known either.  The last minute is left out: slurmdbd may not have
  // been told yet.
  auto running = planc::slurmctld_current_runs(site.value().cluster);
  if (!running.ok()) die(running.error());
  std::set<planc::RunKey> known = std::move(running).value();
  known.insert(billed.begin(), billed.end());
  known.insert(ended.begin(), ended.end());
  const std::set<planc::RunKey>& unended = got.value().unended;
  const int64_t settled = std::min<int64_t>(o.end, time(nullptr) - kJournalSettleSeconds);
  std::vector<planc::Segment> hidden =
      planc::unrecorded_starts(starts.starts, known, o.start, settled);
  std::cout << "run-start journal " << journal << ": " << starts.starts.size() << " start(s), "
            << hidden.size() << " with neither a bill nor an end in slurmdbd";
  if (starts.damaged) std::cout << ", " << starts.damaged << " damaged line(s) skipped";
  std::cout << "\n";
  for (const planc::Segment& r : hidden)
    std::cout << "  unrecorded: job " << r.job_id << " start " << planc::pg_timestamp(r.start_time)
              << " user " << user_name_of(r.uid, r.user) << " account " << r.account << " qos "
              << r.qos << " nodes " << r.nodes << " cpus " << r.cpus << " requested " << r.tres_req
              << (unended.count({r.cluster, r.job_id, r.start_time})
                      ? " (slurmdbd: runaway, started and never ended)"
                      : " (slurmdbd: no record)")
              << "\n";
  if (!hidden.empty())
    std::cout << "  (these ran on the nodes but no bill can be filled: their end is recorded "
                 "nowhere Plan C reads; see docs/admin-guide.md, \"After a controller crash\")\n";
  return (missing.empty() || o.fill) && hidden.empty() ? 0 : 3;
}

// --- sync-roles --------------------------------------------------------------------------

int cmd_sync_roles(planc::BillStore& store, const Options& o) {
  std::string users = run({"sacctmgr", "-n", "-P", "list", "user", "format=User,AdminLevel"});
  size_t n = 0, changes = 0;
  auto member = [&](const std::string& role, const char* group) {
    if (o.dry_run) {
      // What ensure_member would do, read only.
      auto r = store.rows(
          "SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1) "
          "THEN 'create' WHEN pg_has_role($1, $2, 'MEMBER') THEN 'ok' ELSE 'grant' END",
          {role, group});
      if (!r.ok()) die(r.error());
      const std::string what = r.value().empty() ? "" : r.value()[0][0];
      if (what == "create")
        std::cout << "would create login role " << role << " in " << group << "\n";
      else if (what == "grant")
        std::cout << "would make " << role << " a member of " << group << "\n";
      changes += what != "ok";
      return;
    }
    auto r = store.rows("SELECT planc.ensure_member($1, $2)::text", {role, group});
    if (!r.ok()) die(r.error());
  };
  for (const std::string& line : split(users, '\n')) {
    std::vector<std::string> v = split(line, '|');
    if (v.size() < 2 || v[0].empty()) continue;
    member(v[0], "planc_reader");
    if (v[1] == "Administrator") member(v[0], "planc_admin");
    n++;
  }
  if (!o.writer.empty()) member(o.writer, "planc_writer");
  if (!o.metrics.empty()) member(o.metrics, "planc_metrics");
  std::string coords =
      run({"sacctmgr", "-n", "-P", "list", "user", "withcoord", "format=User,Coordinators"});
  std::vector<std::string> accts, names;
  for (const std::string& line : split(coords, '\n')) {
    std::vector<std::string> v = split(line, '|');
    if (v.size() < 2 || v[1].empty()) continue;
    for (const std::string& a : split(v[1], ',')) {
      accts.push_back(a);
      names.push_back(v[0]);
    }
  }
  size_t pairs = accts.size();
  if (o.dry_run) {
    std::cout << "sync-roles --dry-run: " << changes << " role change(s) for " << n
              << " Slurm user(s); would set " << pairs
              << " coordinator pair(s); nothing was changed\n";
    return 0;
  }
  auto r = store.rows("SELECT planc.set_coordinators($1::text[], $2::text[])::text",
                      {planc::pg_text_array(accts), planc::pg_text_array(names)});
  if (!r.ok()) die(r.error());
  std::cout << "sync-roles: " << n << " user role(s), " << pairs << " coordinator pair(s)"
            << (o.writer.empty() ? "" : ", writer " + o.writer)
            << (o.metrics.empty() ? "" : ", metrics reader " + o.metrics) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  if (!std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    std::cout << kUsage;
    return 0;
  }
  // Allow --db before the command.
  std::string db_early;
  int first = 1;
  if ((!std::strcmp(argv[1], "--db") || !std::strcmp(argv[1], "-d")) && argc > 2) {
    db_early = argv[2];
    first = 3;
  }
  // No command, only options: list, as sacct lists.  getopt reads from
  // argv[1] on: the options start after argv[first - 1].
  std::string cmd = "list";
  if (first < argc && argv[first][0] != '-') {
    cmd = argv[first];
    // Subcommands of market: history, bids.
    if (cmd == "market" && argc > first + 1 &&
        (!std::strcmp(argv[first + 1], "history") || !std::strcmp(argv[first + 1], "bids")))
      cmd = std::string("market ") + argv[++first];
  } else {
    first--;
  }
  static const std::set<std::string> kCommands = {
      "list",   "report",  "measure",    "reconcile",      "rollup",
      "market", "columns", "sync-roles", "market history", "market bids"};
  if (!kCommands.count(cmd)) usage_error("unknown command '" + cmd + "'");
  Options o = parse_options(argc - first, argv + first);
  if (!db_early.empty()) o.db = db_early;
  if (o.help_format) return cmd_help_format();
  if (cmd == "columns") return cmd_columns(o);
  // Connect as the Unix user running this (row-level security decides what
  // they see) unless the connection string names a role itself.
  std::string as_user;
  auto check = planc::check_conninfo(o.db);
  if (check.ok && !check.names_user) {
    if (struct passwd* pw = getpwuid(getuid())) as_user = pw->pw_name;
  }
  // The market's bills are optional: a bad --db is said in its line.
  if (cmd == "market") return cmd_market(o, as_user, check.ok ? "" : "--db: " + check.error);
  if (!check.ok) usage_error("--db: " + check.error);
  planc::BillStore store(o.db, as_user);
  if (auto c = store.connect(); !c.ok())
    die(c.error() + "\n(set --db or PLANC_BILL_DB to the JobCompLoc connection string)");
  if (cmd == "list") return cmd_list(store, o);
  if (cmd == "report") return o.efficiency ? cmd_report_efficiency(store, o) : cmd_report(store, o);
  if (cmd == "measure") return cmd_measure(store, o);
  if (cmd == "reconcile") return cmd_reconcile(store, o);
  if (cmd == "rollup") return cmd_rollup(store);
  if (cmd == "sync-roles") return cmd_sync_roles(store, o);
  if (cmd == "market history") return cmd_market_history(store, o);
  return cmd_market_bids(store, o);
}
