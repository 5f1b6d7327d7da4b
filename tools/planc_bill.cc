// planc-bill: read Plan C bills, reconcile them with slurmdbd, manage who
// may read them.  Talks to PostgreSQL as the user who runs it (row-level
// security decides what that user sees), to slurmdbd through libslurmdb
// (tools/slurmdbd_runs.h), and to sacctmgr for the role list.
#include <getopt.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
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
#include "tools/run_command.h"
#include "tools/slurmdbd_runs.h"

namespace {

const char* kUsage =
    "usage: planc-bill [--db CONNINFO] COMMAND [options]\n"
    "\n"
    "  list      [-S START] [-E END] [-u USER] [-A ACCOUNT] [-j JOBID] [--format table|csv|json]\n"
    "            one line per bill (run segment)\n"
    "  report    [-S START] [-E END] [-u USER] [-A ACCOUNT] [--by KEYS] [--format ...]\n"
    "            totals from the hourly table; KEYS: any of account,user,tier,day,hour\n"
    "            (comma-separated; default account,user,tier)\n"
    "  report --efficiency [-S START] [-E END] [-u USER] [-A ACCOUNT] [--format ...]\n"
    "            per account and user, over the bills `measure` has measured: allocated\n"
    "            core-hours against used CPU hours (slurmdbd's TotalCPU of the steps), and\n"
    "            allocated memory GiB-hours against peak-memory GiB-hours (each run's\n"
    "            MaxRSS held for its whole billed time: an upper bound of what it used)\n"
    "  measure   [-S START] [-E END] [--settle SECONDS]\n"
    "            fills the measured-usage columns of bills in the window (default: the\n"
    "            last 7 days) not measured yet, from their runs' steps in slurmdbd (read\n"
    "            through libslurmdb), as the writer role run by SlurmUser (e.g. from\n"
    "            etc/systemd/planc-bill-measure.timer).  A run slurmdbd has no end for\n"
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
    "  market    [--format table|json]\n"
    "            the P2 spot market as slurmctld/planc shows it (scontrol show\n"
    "            config): the floor per GPU type against the list price, the\n"
    "            vacancy behind it, the last and next round; no database\n"
    "  market history [-S START] [-E END] [--format table|csv|json]\n"
    "            the market's rounds (planc.market_round, public to every user):\n"
    "            time, GPU type, GPUs offered, vacancy, floor, list and clearing\n"
    "            price per card-hour, bids and winners; default: the last 24 h\n"
    "  market bids [-S START] [-E END] [-u USER] [-A ACCOUNT] [--format ...]\n"
    "            the bids in those rounds you may see (your own; a coordinator's\n"
    "            accounts'; an admin all): job, bid, GPUs, outcome, price paid\n"
    "  columns   [--format ...]\n"
    "            planc.bill's columns as this release writes and reads them\n"
    "            (what the migrations in sql/ must have created)\n"
    "  sync-roles [--writer ROLE] [--metrics ROLE] [--dry-run]\n"
    "            creates a PostgreSQL login role for every Slurm user (planc_reader),\n"
    "            admins (planc_admin), the writer (slurmctld's user, planc_writer),\n"
    "            planc-exporter's role (planc_metrics: billed totals per account and\n"
    "            tier, no bill) and the account coordinator list, from sacctmgr\n"
    "            (database superuser)\n"
    "\n"
    "Times are UTC: 2026-11-30, 2026-11-30T13:00[:00], or seconds since the epoch.\n"
    "--db defaults to $PLANC_BILL_DB, else libpq's PG* environment.\n";

[[noreturn]] void die(const std::string& msg) {
  std::cerr << "planc-bill: " << msg << "\n";
  std::exit(1);
}

int64_t parse_time(const std::string& s, const char* opt) {
  if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos) return std::stoll(s);
  struct tm tm = {};
  const char* end = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end || *end) {
    tm = {};
    end = strptime(s.c_str(), "%Y-%m-%dT%H:%M", &tm);
  }
  if (!end || *end) {
    tm = {};
    end = strptime(s.c_str(), "%Y-%m-%d", &tm);
  }
  if (!end || *end)
    die(std::string(opt) + " '" + s +
        "' is not a time: use 2026-11-30, 2026-11-30T13:00 or epoch seconds (UTC)");
  return timegm(&tm);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

// --- output ----------------------------------------------------------------------

std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\n") == std::string::npos) return v;
  std::string o = "\"";
  for (char c : v) {
    if (c == '"') o += '"';
    o += c;
  }
  return o + "\"";
}

std::string json_string(const std::string& v) {
  std::string o = "\"";
  for (unsigned char c : v) {
    switch (c) {
      case '"':
        o += "\\\"";
        break;
      case '\\':
        o += "\\\\";
        break;
      case '\n':
        o += "\\n";
        break;
      case '\t':
        o += "\\t";
        break;
      case '\r':
        o += "\\r";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += static_cast<char>(c);
        }
    }
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

// `numeric` marks columns printed as numbers in JSON and right-aligned.
void print(const std::vector<std::string>& cols, const std::vector<bool>& numeric,
           const std::vector<std::vector<std::string>>& rows, const std::string& format) {
  if (format == "csv") {
    for (size_t j = 0; j < cols.size(); j++) std::cout << (j ? "," : "") << csv_field(cols[j]);
    std::cout << "\n";
    for (const auto& r : rows) {
      for (size_t j = 0; j < r.size(); j++) std::cout << (j ? "," : "") << csv_field(r[j]);
      std::cout << "\n";
    }
  } else if (format == "json") {
    std::cout << "[";
    for (size_t i = 0; i < rows.size(); i++) {
      std::cout << (i ? ",\n " : "\n ") << "{";
      for (size_t j = 0; j < cols.size(); j++) {
        std::cout << (j ? ", " : "") << json_string(cols[j]) << ": ";
        // A numeric column may hold a non-number (an array task's JobID
        // 7_3): quote it.
        bool num = numeric[j] && !rows[i][j].empty() &&
                   rows[i][j].find_first_not_of("0123456789.-") == std::string::npos;
        std::cout << (num ? rows[i][j] : json_string(rows[i][j]));
      }
      std::cout << "}";
    }
    std::cout << (rows.empty() ? "]\n" : "\n]\n");
  } else if (format == "table") {
    std::vector<size_t> w(cols.size());
    for (size_t j = 0; j < cols.size(); j++) w[j] = width(cols[j]);
    for (const auto& r : rows)
      for (size_t j = 0; j < r.size(); j++) w[j] = std::max(w[j], width(r[j]));
    auto line = [&](const std::vector<std::string>& r) {
      std::string out;
      for (size_t j = 0; j < r.size(); j++) {
        std::string pad(w[j] - width(r[j]), ' ');
        out += (j ? " " : "") + (numeric[j] ? pad + r[j] : r[j] + pad);
      }
      while (!out.empty() && out.back() == ' ') out.pop_back();
      std::cout << out << "\n";
    };
    line(cols);
    std::vector<std::string> dashes;
    for (size_t x : w) dashes.emplace_back(x, '-');
    line(dashes);
    for (const auto& r : rows) line(r);
  } else {
    die("--format '" + format + "': use table, csv or json");
  }
}

// --- options -----------------------------------------------------------------------

struct Options {
  std::string db;
  int64_t start = 0, end = 0;
  std::vector<std::string> users, accounts, by;
  std::vector<uint32_t> jobs;
  std::string format = "table";
  bool fill = false;
  std::string planc_conf;
  std::string journal;
  std::string writer;
  std::string metrics;   // sync-roles --metrics: planc-exporter's role
  bool dry_run = false;  // sync-roles --dry-run: say what would change
  bool efficiency = false;
  int64_t settle = 300;
};

Options parse_options(int argc, char** argv) {
  Options o;
  if (const char* db = std::getenv("PLANC_BILL_DB")) o.db = db;
  static const option longopts[] = {
      {"db", required_argument, nullptr, 'd'},      {"starttime", required_argument, nullptr, 'S'},
      {"endtime", required_argument, nullptr, 'E'}, {"user", required_argument, nullptr, 'u'},
      {"account", required_argument, nullptr, 'A'}, {"jobs", required_argument, nullptr, 'j'},
      {"format", required_argument, nullptr, 'f'},  {"by", required_argument, nullptr, 'b'},
      {"fill", no_argument, nullptr, 'F'},          {"planc-conf", required_argument, nullptr, 'c'},
      {"writer", required_argument, nullptr, 'w'},  {"help", no_argument, nullptr, 'h'},
      {"journal", required_argument, nullptr, 'J'}, {"efficiency", no_argument, nullptr, 'e'},
      {"settle", required_argument, nullptr, 's'},  {"metrics", required_argument, nullptr, 'M'},
      {"dry-run", no_argument, nullptr, 'n'},       {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "d:S:E:u:A:j:f:b:h", longopts, nullptr)) != -1) {
    switch (c) {
      case 'd':
        o.db = optarg;
        break;
      case 'S':
        o.start = parse_time(optarg, "-S");
        break;
      case 'E':
        o.end = parse_time(optarg, "-E");
        break;
      case 'u':
        for (auto& s : split(optarg, ',')) o.users.push_back(s);
        break;
      case 'A':
        for (auto& s : split(optarg, ',')) o.accounts.push_back(s);
        break;
      case 'j':
        for (auto& s : split(optarg, ',')) {
          if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
            die("-j '" + s + "' is not a job id (use numeric ids, comma-separated)");
          o.jobs.push_back(static_cast<uint32_t>(std::stoul(s)));
        }
        break;
      case 'f':
        o.format = optarg;
        break;
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
      case 'e':
        o.efficiency = true;
        break;
      case 's': {
        std::string v = optarg;
        if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos)
          die("--settle '" + v + "' is not a number of seconds");
        o.settle = std::stoll(v);
        break;
      }
      case 'n':
        o.dry_run = true;
        break;
      case 'h':
        std::cout << kUsage;
        std::exit(0);
      default:
        std::cerr << kUsage;
        std::exit(2);
    }
  }
  return o;
}

// --- list ----------------------------------------------------------------------------

int cmd_list(planc::BillStore& store, const Options& o) {
  planc::BillFilter f;
  f.users = o.users;
  f.accounts = o.accounts;
  f.job_ids = o.jobs;
  f.start = o.start;
  f.end = o.end;
  auto r = store.query(f);
  if (!r.ok()) die(r.error());
  // The columns and their text come from the bill's column table
  // (common/bill_schema.h).  Amount is the bill's exact amount (micro-units,
  // 6 decimals): bills are summed exactly and rounded per invoice line (see
  // report).
  std::vector<const planc::BillColumn*> listed;
  std::vector<std::string> cols;
  std::vector<bool> num;
  for (const planc::BillColumn& c : planc::bill_columns()) {
    if (!c.list_label) continue;
    listed.push_back(&c);
    cols.emplace_back(c.list_label);
    num.push_back(planc::column_is_numeric(c));
  }
  std::vector<std::vector<std::string>> rows;
  for (const planc::Bill& b : r.value()) {
    std::vector<std::string> row;
    for (const planc::BillColumn* c : listed) row.push_back(planc::show_column(*c, b));
    rows.push_back(std::move(row));
  }
  print(cols, num, rows, o.format);
  return 0;
}

// --- columns -----------------------------------------------------------------

// planc.bill's columns as Plan C writes and reads them (the column table,
// common/bill_schema.h), as information_schema.columns names them: what the
// migrations must create.  Needs no database.
int cmd_columns(const Options& o) {
  std::vector<std::string> cols = {"Column", "Type", "Nullable"};
  std::vector<bool> num = {false, false, false};
  std::vector<std::vector<std::string>> rows;
  for (const planc::BillColumn& c : planc::bill_columns())
    if (c.in_table()) rows.push_back({c.name, c.sql_type, c.nullable ? "YES" : "NO"});
  print(cols, num, rows, o.format);
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
  std::vector<std::string> cols;
  std::vector<bool> num;
  for (const std::string& k : by) {
    std::string expr, name;
    if (k == "account")
      expr = "account", name = "Account";
    else if (k == "user")
      expr = "user_name", name = "User";
    else if (k == "tier")
      expr = "tier", name = "Tier";
    else if (k == "day")
      expr = "to_char(hour, 'YYYY-MM-DD')", name = "Day(UTC)";
    else if (k == "hour")
      expr = "to_char(hour, 'YYYY-MM-DD\"T\"HH24:00')", name = "Hour(UTC)";
    else
      die("--by '" + k + "': use account, user, tier, day or hour");
    select += expr + ", ";
    group += (group.empty() ? "" : ", ") + expr;
    cols.push_back(name);
    num.push_back(false);
  }
  // Each printed line is one invoice line: its hours' exact micro-unit
  // amounts are summed, then rounded once, half up, to minor units.  TOTAL
  // is the sum of the printed lines.
  std::string sql =
      "SELECT " + select +
      "sum(segments), round(sum(card_seconds) / 3600, 3), round(sum(core_seconds) / 3600.0, 3),"
      " round(sum(mem_gib_seconds) / 3600, 3), sum(amount_micros)"
      " FROM planc.usage_hourly WHERE true";
  std::vector<std::string> params;
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
  if (!r.ok()) die(r.error());
  for (const char* c :
       {"Segments", "CardHours", "CoreHours", "MemGiBHours", "AmountExact", "Amount"}) {
    cols.push_back(c);
    num.push_back(true);
  }
  std::vector<std::vector<std::string>> rows = r.value();
  int64_t total_minor = 0, total_micros = 0;
  for (auto& row : rows) {
    int64_t micros = std::strtoll(row.back().c_str(), nullptr, 10);
    int64_t minor = planc::minor_of_micros(micros);
    total_micros += micros;
    total_minor += minor;
    row.back() = planc::format_micros6(micros);
    row.push_back(planc::format_minor(minor));
  }
  if (o.format == "table" && !by.empty()) {
    std::vector<std::string> t(cols.size());
    t[0] = "TOTAL";
    t[t.size() - 2] = planc::format_micros6(total_micros);
    t.back() = planc::format_minor(total_minor);
    rows.push_back(t);
  }
  print(cols, num, rows, o.format);
  return 0;
}

// --- report --efficiency ----------------------------------------------------------------

// From planc.bill, so row-level security applies (a user sees their own
// bills), over the bills whose usage was measured (used_cpu_seconds set):
// both sides of a ratio cover the same runs.  Peak-memory GiB-hours: each
// bill's MaxRSS in GiB times its billed hours, summed.
int cmd_report_efficiency(planc::BillStore& store, const Options& o) {
  if (!o.by.empty()) die("--efficiency reports per account and user: leave out --by");
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
  const std::vector<std::string> cols = {
      "Account",         "User",          "Bills",      "Measured",
      "AllocCoreHours",  "UsedCoreHours", "CPUPercent", "AllocMemGiBHours",
      "PeakMemGiBHours", "MemPercent"};
  const std::vector<bool> num = {false, false, true, true, true, true, true, true, true, true};
  print(cols, num, r.value(), o.format);
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
  if (o.format != "table" && o.format != "json")
    die("--format '" + o.format + "': use table or json");
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
  std::cout << planc::format_market_status(s, o.format == "json");
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
      "SELECT to_char(round_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), gpu_type, "
      "capacity_gpus::text, coalesce(to_char(vacancy_permille / 10.0, 'FM990.0') || '%', ''), " +
      price_sql("floor_micros") + ", " + price_sql("list_micros") + ", " + "coalesce(" +
      price_sql("clearing_micros") + ", 'none')" +
      ", bids::text, winners::text FROM planc.market_round"
      " WHERE round_at >= to_timestamp($1::bigint) AND round_at <= to_timestamp($2::bigint)"
      " ORDER BY round_at DESC, gpu_type";
  auto r = store.rows(sql, {std::to_string(start), std::to_string(end)});
  if (!r.ok()) die(r.error() + " (the market's records need migration 0006: run planc-migrate)");
  print({"Round", "GPUType", "OfferedGPUs", "Vacancy", "Floor", "List", "Clearing", "Bids",
         "Winners"},
        {false, false, true, false, true, true, true, true, true}, r.value(), o.format);
  return 0;
}

int cmd_market_bids(planc::BillStore& store, const Options& o) {
  int64_t start, end;
  market_window(o, &start, &end);
  std::vector<std::string> params = {std::to_string(start), std::to_string(end)};
  std::string sql =
      "SELECT to_char(round_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), "
      "job_id::text, user_name, account, coalesce(" +
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
  print({"Round", "JobID", "User", "Account", "Bid", "GPUs", "Outcome", "Pays"},
        {false, true, false, false, true, true, false, true}, r.value(), o.format);
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
int cmd_reconcile(planc::BillStore& store, const Options& o) {
  if (!o.start || !o.end) die("reconcile needs -S and -E");
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
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  // Allow --db before the command.
  std::string db_early;
  int first = 1;
  if (!std::strcmp(argv[1], "--db") && argc > 3) {
    db_early = argv[2];
    first = 3;
  }
  std::string cmd = argv[first];
  // Subcommands of market: history, bids.
  if (cmd == "market" && argc > first + 1 &&
      (!std::strcmp(argv[first + 1], "history") || !std::strcmp(argv[first + 1], "bids")))
    cmd = std::string("market ") + argv[++first];
  Options o = parse_options(argc - first, argv + first);
  if (!db_early.empty()) o.db = db_early;
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
  if (!check.ok) die("--db: " + check.error);
  planc::BillStore store(o.db, as_user);
  if (auto c = store.connect(); !c.ok())
    die(c.error() + "\n(set --db or PLANC_BILL_DB to the JobCompLoc connection string)");
  if (cmd == "list") return cmd_list(store, o);
  if (cmd == "report") return o.efficiency ? cmd_report_efficiency(store, o) : cmd_report(store, o);
  if (cmd == "measure") return cmd_measure(store, o);
  if (cmd == "reconcile") return cmd_reconcile(store, o);
  if (cmd == "sync-roles") return cmd_sync_roles(store, o);
  if (cmd == "market history") return cmd_market_history(store, o);
  if (cmd == "market bids") return cmd_market_bids(store, o);
  std::cerr << "planc-bill: unknown command '" << cmd << "'\n" << kUsage;
  return 2;
}
