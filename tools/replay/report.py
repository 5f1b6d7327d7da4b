"""planc-replay's report: section 9 KPIs, consistency checks, comparison, plots.

    python3 -m tools.replay.report RUN_DIR... --out DIR

reads one directory per replay run (the cluster-driving half writes them)
and writes DIR/report.md and DIR/*.png.  Exit status 0, or 3 when a run
has consistency problems (they are listed in report.md and on stderr).

== Inputs: one run directory ==============================================

All times are wall-clock epoch seconds (int or float); the report turns
durations into trace time by multiplying by k.  CSV files have a header
line with these names (in any order; other columns are ignored).

run.json
    {"config": "stock" | "planc",      which configuration ran
     "run": 1,                         repetition of that config (1, 2, ...)
     "k": 20,                          time compression factor
     "t0": 1796064738.0,               wall epoch of trace time 0
     "end": 1796064918.0,              wall epoch the measurement stops:
                                       every KPI covers [t0, end]; the
                                       driver cancels what still runs then
     "gpus_total": 32,                 GPUs in the pool
     "workload": "workload.csv",       optional: the workload replayed
                                       (tools.replay.workload CSV; relative
                                       to the run dir); every job of it must
                                       appear in jobs.csv
     "sla_seconds": 40,                optional: SlaStartSeconds, wall s
     "guaranteed_cap_percent": 80,     optional: GuaranteedCapPercent
     "currency": "CNY"}                optional: planc.conf Currency

jobs.csv: one row per job of the workload that was submitted
    name         the workload's job name (w000001), unique
    job_id       Slurm's job id, unique
    tier         the tier the job was submitted in (P0..P3); a P3 job on
                 its free P2 attempt is still P3 here
    gpus         GPU cards asked for (float)
    submit       when the driver submitted it
    eligible     Slurm's EligibleTime of its first run (empty: = submit)
    first_start  start of its first run (empty if it never ran)
    end          end of its last run (empty if it has not ended)
    final_state  Slurm's state at the end of the replay (COMPLETED,
                 CANCELLED, PREEMPTED, FAILED, TIMEOUT, PENDING, RUNNING...)
    restarts     Slurm's restart count (requeues)
    held_reason  optional: empty, or why the job was held back by its own
                 limits before its first start, as planc-exporter's
                 planc_guaranteed_starts_excluded_total reason says
                 (held, dependency, begin_time, limit); such P0/P1 jobs are
                 left out of the SLA as the exporter's metric does

segments.csv: one row per bill in planc.bill (jobcomp/planc bills both
    configurations), i.e. one per run segment
    job_id, segment (Slurm's restart count at the run), tier (the tier it
    ran as: a free P2 attempt is P2), start, end, state (COMPLETED,
    PREEMPTED, REQUEUED, CANCELLED, FAILED, TIMEOUT, NODE_FAIL...),
    gpu_cards (float), card_seconds, amount_micros, zero_reason
    A bill whose zero_reason is "never ran" (cancelled while pending) is
    not a run: the KPIs and the slurmdbd comparison leave it out, but the
    check counts it: once a job has ended its bills number its restart
    count + 1.  The driver cancels, at `end`, every job still running or
    pending, so every run has ended and has its bill.

sacct_segments.csv: the same runs as slurmdbd has them, from
    `sacct -a -D -X -P -n --noconvert -o JobIDRaw,Start,End,State` with
    SLURM_TIME_FORMAT=%s, runs that never started left out
    job_id, start, end, state (only its first word is compared:
    "CANCELLED by 0" is CANCELLED)

== KPIs: docs/metrics-and-alerts.md's definitions, over [t0, end] =========

Section 9's own KPIs (the SLA over every submission, P2 run before
interruption, P3 preemption rate by submitted tier, utilisation beside its
greedy ceiling, goodput) are defined once in tools/replay/kpi.py
(`section9` below); the report's table judges them against the policy's
targets.  What follows are the exporter's readings, shown beside them.

- P0/P1 SLA attainment: guaranteed jobs that started within SlaStartSeconds
  of becoming eligible, over those that started and count for the SLA
  (planc_guaranteed_starts_within_sla_total / planc_guaranteed_starts_total;
  jobs held back by their own limits left out).  The 40 s are *wall*
  seconds: a scheduler latency does not scale with k (workload.py).  Also
  shown: the same counting every started job, and guaranteed jobs that
  never started although eligible for at least those seconds before the
  window ended (the metric cannot see those).
- P2 mean run: the mean length of P2 run segments that ended (preempted
  ones included), by the tier they ran as (planc:p2_mean_run_seconds:24h),
  over the whole replay; also per trace day.  Runs the driver cancels at
  `end` count as they ended, as the exporter would count them, so a short
  replay of long jobs reads low.
- P3 preemption rate per hour: per trace hour, P3 preemptions (segments
  that ended preempted) over P3 runs that ended in the hour plus P3 runs
  running at its end (planc:p3_preemption_rate:ratio_1h and
  planc:p3_jobs_ran:1h); an hour with no P3 run has no value, not 0.  Mean
  and worst hour.
- Preemptions per P2 job in 24 h: per job submitted in P2, the most of its
  preemptions (segment ends) inside any 24 h trace window
  (planc_preemptions_per_job_24h_max; a starved P3 job is P3 there); the
  max and the p99 over P2 jobs that ran.
- Utilisation: GPU-seconds allocated over GPU-seconds in the pool
  (planc:gpu_utilisation:avg_1h), with fractional cards by their share
  (the bill's gpu_cards).
- Wait per tier: first start - eligible, trace seconds, p50 and p99 over
  jobs that started (percentiles: nearest rank); the longest P3 wait
  counts a job that never started up to `end`.  For P2 also from
  submission (a bid held for its market round is not eligible until the
  round releases it), and the P2 jobs that never started.
- Lost GPU-hours: gpu_cards x length of preempted segments (docs/billing.md's
  "unfinished preempted time"), per tier; P2 jobs checkpoint, so theirs is
  lost runtime rather than lost work.
- Revenue: sum of amount_micros (both configs are billed by jobcomp/planc
  at the same prices), times k for trace time.
A segment counts as preempted when its state is PREEMPTED or its bill's
zero_reason starts with "preempted" (a victim that ended in its grace).
"""

import csv
import gzip
import json
import math
import os
import re
import sys
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from tools.replay import kpi
from tools.replay.kpi import max_in_window, rate_by_hour  # noqa: F401 (R.max_in_window)

TIERS = ("P0", "P1", "P2", "P3")
CONFIG_ORDER = ("stock", "planc", "planc-nobudget", "planc-market", "planc-infusion")
JOB_COLUMNS = ("name", "job_id", "tier", "gpus", "submit", "eligible", "first_start", "end",
               "final_state", "restarts")
SEGMENT_COLUMNS = ("job_id", "segment", "tier", "start", "end", "state", "gpu_cards",
                   "card_seconds", "amount_micros", "zero_reason")
SACCT_COLUMNS = ("job_id", "start", "end", "state")
# planc-infusion runs only: the replicas' bills and the scale operations.
REPLICA_COLUMNS = ("job_id", "segment", "tier", "start", "end", "gpu_cards", "zero_reason", "pool")
OPS_COLUMNS = ("at", "action", "pool")
RUN_KEYS = ("config", "run", "k", "t0", "end", "gpus_total")
NEVER_RAN = "never ran"
HOUR, DAY = 3600.0, 86400.0


class Problem(Exception):
    """A run directory that cannot be read at all."""


# --- reading a run -------------------------------------------------------


def _num(s: str) -> Optional[float]:
    s = (s or "").strip()
    return float(s) if s else None


def _read_csv(path: str, columns: Sequence[str], problems: List[str]) -> List[Dict[str, str]]:
    """The CSV at `path`, or at `path`.gz as the committed runs keep it."""
    name = os.path.basename(path)
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        with gzip.open(path + ".gz", "rt", newline="") as f:
            return _dict_rows(csv.DictReader(f), name, columns, problems)
    if not os.path.exists(path):
        problems.append(f"{name}: missing")
        return []
    with open(path, newline="") as f:
        return _dict_rows(csv.DictReader(f), name, columns, problems)


def _dict_rows(reader: csv.DictReader, name: str, columns: Sequence[str],
               problems: List[str]) -> List[Dict[str, str]]:
    missing = [c for c in columns if c not in (reader.fieldnames or [])]
    if missing:
        problems.append(f"{name}: columns missing: {', '.join(missing)}")
        return []
    return list(reader)


class Run:
    """One replay run, read from its directory.  `problems` holds what could
    not be read; check_consistency adds the rest."""

    def __init__(self, run_dir: str):
        self.dir = run_dir
        self.problems: List[str] = []
        try:
            with open(os.path.join(run_dir, "run.json")) as f:
                self.meta = json.load(f)
        except (OSError, ValueError) as e:
            raise Problem(f"{run_dir}: run.json unreadable: {e}") from None
        missing = [k for k in RUN_KEYS if k not in self.meta]
        if missing:
            raise Problem(f"{run_dir}: run.json lacks {', '.join(missing)}")
        self.config = str(self.meta["config"])
        self.run = int(self.meta["run"])
        self.k = float(self.meta["k"])
        self.t0 = float(self.meta["t0"])
        self.end = float(self.meta["end"])
        self.gpus_total = float(self.meta["gpus_total"])
        self.sla = float(self.meta.get("sla_seconds", 40))
        self.cap_percent = float(self.meta.get("guaranteed_cap_percent", 80))
        self.currency = str(self.meta.get("currency", "CNY"))
        if self.k <= 0 or self.end <= self.t0 or self.gpus_total <= 0:
            raise Problem(f"{run_dir}: run.json needs k > 0, end > t0 and gpus_total > 0")
        # Trace time 0 (the workload's clock) in wall time; t0 is where the
        # measured window starts, later than origin after a warm-up.
        self.origin = self.t0
        self.all_jobs: List[Dict] = []
        self.warmup_hours = float(self.meta.get("warmup_hours") or 0.0)

        self.jobs: List[Dict] = []
        for n, r in enumerate(_read_csv(os.path.join(run_dir, "jobs.csv"), JOB_COLUMNS,
                                        self.problems), start=2):
            try:
                self.jobs.append({
                    "name": r["name"], "job_id": r["job_id"].strip(), "tier": r["tier"],
                    "gpus": float(r["gpus"]), "submit": float(r["submit"]),
                    "eligible": _num(r["eligible"]) if _num(r["eligible"]) is not None
                    else float(r["submit"]),
                    "first_start": _num(r["first_start"]), "end": _num(r["end"]),
                    "final_state": r["final_state"].split(" ")[0],
                    "restarts": int(r["restarts"] or 0),
                    "held_reason": (r.get("held_reason") or "").strip(),
                })
            except ValueError as e:
                self.problems.append(f"jobs.csv:{n}: unreadable ({e})")

        # All bills, and the runs among them (a "never ran" bill is no run).
        self.bills: List[Dict] = []
        for n, r in enumerate(_read_csv(os.path.join(run_dir, "segments.csv"), SEGMENT_COLUMNS,
                                        self.problems), start=2):
            try:
                zero = (r["zero_reason"] or "").strip()
                self.bills.append({
                    "job_id": r["job_id"].strip(), "segment": int(r["segment"]),
                    "tier": r["tier"], "start": float(r["start"]), "end": float(r["end"]),
                    "state": r["state"].split(" ")[0], "gpu_cards": float(r["gpu_cards"]),
                    "card_seconds": float(r["card_seconds"]),
                    "amount_micros": int(float(r["amount_micros"] or 0)), "zero_reason": zero,
                    "preempted": r["state"].startswith("PREEMPTED") or zero.startswith("preempted"),
                })
            except ValueError as e:
                self.problems.append(f"segments.csv:{n}: unreadable ({e})")
        self.segments = [b for b in self.bills if b["zero_reason"] != NEVER_RAN]

        self.sacct: List[Dict] = []
        for n, r in enumerate(_read_csv(os.path.join(run_dir, "sacct_segments.csv"),
                                        SACCT_COLUMNS, self.problems), start=2):
            try:
                self.sacct.append({"job_id": r["job_id"].strip(), "start": float(r["start"]),
                                   "end": float(r["end"]), "state": r["state"].split(" ")[0]})
            except ValueError as e:
                self.problems.append(f"sacct_segments.csv:{n}: unreadable ({e})")

        # Capacity infusion (planc-infusion runs): absent files, no replicas.
        self.replicas: List[Dict] = []
        self.infusion_ops: List[Dict] = []
        self.infusion = self.meta.get("infusion")
        if self.infusion:
            for n, r in enumerate(_read_csv(os.path.join(run_dir, "replicas.csv"),
                                            REPLICA_COLUMNS, self.problems), start=2):
                try:
                    if (r["zero_reason"] or "").strip() == NEVER_RAN:
                        continue
                    self.replicas.append({"job_id": r["job_id"], "tier": r["tier"],
                                          "start": float(r["start"]), "end": float(r["end"]),
                                          "gpu_cards": float(r["gpu_cards"]), "pool": r["pool"]})
                except ValueError as e:
                    self.problems.append(f"replicas.csv:{n}: unreadable ({e})")
            for n, r in enumerate(_read_csv(os.path.join(run_dir, "infusion_ops.csv"),
                                            OPS_COLUMNS, self.problems), start=2):
                try:
                    self.infusion_ops.append({"at": float(r["at"]), "action": r["action"],
                                              "pool": r["pool"]})
                except ValueError as e:
                    self.problems.append(f"infusion_ops.csv:{n}: unreadable ({e})")

    def trace(self, wall_seconds: float) -> float:
        """A wall duration in trace seconds."""
        return wall_seconds * self.k

    def clip(self, start: float, end: float) -> float:
        """Wall seconds of [start, end] inside the run's window [t0, end]."""
        return max(0.0, min(end, self.end) - max(start, self.t0))


# A run whose submissions were later than this at the 99th percentile
# (trace minutes) replayed a smoother workload than its trace.
MAX_LAG_TRACE_MINUTES = 15.0


def submission_lag(run: Run) -> Optional[Dict[str, float]]:
    """How late Slurm registered each submission against the workload's
    clock (origin + submit / k), wall seconds: p50, p99, max, and the p99 in
    trace minutes.  A submitter that falls behind compresses the trace more
    than k says, and its waits and rates are not the workload's.  None
    without the workload."""
    workload = _workload(run)
    if not workload:
        return None
    due = {w.name: run.origin + w.submit / run.k for w in workload}
    lags = sorted(j["submit"] - due[j["name"]] for j in (run.all_jobs or run.jobs)
                  if j["name"] in due)
    if not lags:
        return None
    p99 = percentile(lags, 99)
    return {"p50": percentile(lags, 50), "p99": p99, "max": lags[-1],
            "p99_trace_minutes": p99 * run.k / 60.0}


def measured(run: Run, warmup_hours: float) -> Run:
    """The run seen from the end of its warm-up: the window starts
    `warmup_hours` of trace time later; jobs that became eligible before
    are left out (their waits and SLA belong to the warm-up), and so are
    run segments and bills that ended before it.  What straddles the
    boundary is clipped where a figure is a share of the window
    (utilisation) and whole where it is a count (a preemption, a bill)."""
    import copy
    if warmup_hours <= 0:
        return run
    m = copy.copy(run)
    m.warmup_hours = warmup_hours
    m.t0 = run.origin + warmup_hours * HOUR / run.k
    if m.t0 >= run.end:
        raise Problem(f"{run.dir}: a warm-up of {warmup_hours:g} h is the whole window")
    m.all_jobs = run.jobs  # the tier of any segment's job; P3's waiting and never started
    m.jobs = [j for j in run.jobs if j["eligible"] >= m.t0]
    m.bills = [b for b in run.bills if b["end"] > m.t0]
    m.segments = [s for s in run.segments if s["end"] > m.t0]
    m.replicas = [r for r in run.replicas if r["end"] > m.t0]
    return m


# --- small helpers -------------------------------------------------------


def config_order(configs: Iterable[str]) -> List[str]:
    """The configs present, stock then planc, then any other by name."""
    present = set(configs)
    return [c for c in CONFIG_ORDER if c in present] + sorted(present - set(CONFIG_ORDER))


def percentile(values: Sequence[float], p: float) -> Optional[float]:
    """Nearest-rank percentile (p in 0..100): the ceil(p/100 * n)-th smallest."""
    if not values:
        return None
    v = sorted(values)
    return v[max(0, min(len(v) - 1, math.ceil(p / 100.0 * len(v)) - 1))]


def _mean(values: Sequence[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def timeline(run: Run) -> Tuple[List[float], Dict[str, List[float]]]:
    """GPUs allocated per tier (ran as) as a step function over [t0, end]:
    times (wall) and, per tier, the value from each time to the next."""
    events: Dict[float, Dict[str, float]] = {}
    for s in run.segments:
        a, b = max(s["start"], run.t0), min(s["end"], run.end)
        if b <= a or s["tier"] not in TIERS:
            continue
        events.setdefault(a, {}).setdefault(s["tier"], 0.0)
        events[a][s["tier"]] += s["gpu_cards"]
        events.setdefault(b, {}).setdefault(s["tier"], 0.0)
        events[b][s["tier"]] -= s["gpu_cards"]
    times = sorted(set(events) | {run.t0, run.end})
    level = {t: 0.0 for t in TIERS}
    values: Dict[str, List[float]] = {t: [] for t in TIERS}
    for t in times:
        for tier, d in events.get(t, {}).items():
            level[tier] += d
        for tier in TIERS:
            values[tier].append(max(0.0, level[tier]) if abs(level[tier]) > 1e-9 else 0.0)
    return times, values


def timeline_gpu_seconds(times: Sequence[float], values: Dict[str, List[float]]) -> Dict[str, float]:
    return {tier: sum(values[tier][i] * (times[i + 1] - times[i]) for i in range(len(times) - 1))
            for tier in TIERS}


# --- KPIs ------------------------------------------------------------------


def compute_kpis(run: Run) -> Dict[str, object]:
    """The KPIs of one run (module comment); None where there is nothing to
    compute over, never 0/0."""
    k = run.k
    out: Dict[str, object] = {"config": run.config, "run": run.run, "k": run.k}
    jobs_by_id = {j["job_id"]: j for j in run.all_jobs or run.jobs}

    # SLA attainment (wall seconds, see module comment).
    for tier in ("P0", "P1"):
        started = [j for j in run.jobs if j["tier"] == tier and j["first_start"] is not None]
        counted = [j for j in started if not j["held_reason"]]
        lat = [j["first_start"] - j["eligible"] for j in counted]
        lat_all = [j["first_start"] - j["eligible"] for j in started]
        within = sum(1 for x in lat if x <= run.sla)
        out[f"{tier.lower()}_sla"] = within / len(counted) if counted else None
        out[f"{tier.lower()}_sla_all"] = (sum(1 for x in lat_all if x <= run.sla) / len(started)
                                          if started else None)
        out[f"{tier.lower()}_sla_counted"] = len(counted)
        out[f"{tier.lower()}_start_p50_wall"] = percentile(lat_all, 50)
        out[f"{tier.lower()}_start_p99_wall"] = percentile(lat_all, 99)
        out[f"{tier.lower()}_start_max_wall"] = max(lat_all) if lat_all else None
        # Never started although eligible for at least the SLA's seconds
        # before the window ended (a job submitted in the last 40 s had no
        # chance: it is left out).
        out[f"{tier.lower()}_never_started"] = sum(
            1 for j in run.jobs if j["tier"] == tier and j["first_start"] is None
            and (j["eligible"] if j["eligible"] is not None else j["submit"]) + run.sla <= run.end)

    # P2 mean run: segments that ran as P2 and ended (all of them end: the
    # driver cancels what runs at `end`), preempted ones included.
    p2 = [s for s in run.segments if s["tier"] == "P2"]
    out["p2_mean_run_h"] = (_mean([run.trace(s["end"] - s["start"]) for s in p2]) / HOUR
                            if p2 else None)
    out["p2_segments"] = len(p2)
    out["p2_segments_preempted"] = sum(1 for s in p2 if s["preempted"])
    per_day: Dict[int, List[float]] = {}
    for s in p2:
        per_day.setdefault(int(run.trace(s["end"] - run.t0) // DAY), []).append(
            run.trace(s["end"] - s["start"]))
    out["p2_mean_run_h_by_day"] = {d: _mean(v) / HOUR for d, v in sorted(per_day.items())}

    # P3 preemption rate per trace hour, by the tier run as (the exporter's
    # reading; section9 has it by submitted tier).
    rates = [h["rate"] for h in rate_by_hour([s for s in run.segments if s["tier"] == "P3"],
                                             run.t0, run.end, HOUR / k)]
    valued = [r for r in rates if r is not None]
    out["p3_rate_by_hour"] = rates
    out["p3_preempt_rate_mean"] = _mean(valued)
    out["p3_preempt_rate_worst"] = max(valued) if valued else None

    # Preemptions per P2 job (the tier it was submitted in) in any 24 h.
    preempt_ends: Dict[str, List[float]] = {}
    ran_ids = set()
    for s in run.segments:
        ran_ids.add(s["job_id"])
        if s["preempted"]:
            preempt_ends.setdefault(s["job_id"], []).append(s["end"])
    per_job = {tier: [max_in_window(preempt_ends.get(j["job_id"], []), DAY / k)
                      for j in run.jobs if j["tier"] == tier and j["job_id"] in ran_ids]
               for tier in TIERS}
    out["p2_preempt_24h_max"] = max(per_job["P2"]) if per_job["P2"] else None
    out["p2_preempt_24h_p99"] = percentile(per_job["P2"], 99)
    out["preemptions_per_job"] = {tier: [len(preempt_ends.get(j["job_id"], []))
                                         for j in run.jobs
                                         if j["tier"] == tier and j["job_id"] in ran_ids]
                                  for tier in TIERS}

    # Utilisation, and the guaranteed tiers' peak share (the 80% cap).
    times, values = timeline(run)
    gsec = timeline_gpu_seconds(times, values)
    pool = run.gpus_total * (run.end - run.t0)
    # Infused replicas use GPUs too: in the utilisation, not in any tier's
    # figures (revenue, SLA, waits are the workload's).
    replica_gsec = sum(r["gpu_cards"] * run.clip(r["start"], r["end"]) for r in run.replicas)
    out["utilisation"] = (sum(gsec.values()) + replica_gsec) / pool
    out["utilisation_workload"] = sum(gsec.values()) / pool
    out["utilisation_replicas"] = replica_gsec / pool if run.infusion else None
    out["utilisation_by_tier"] = {t: gsec[t] / pool for t in TIERS}
    # Scale operations per trace hour (the limit's window), against the limit.
    if run.infusion:
        hour_w = HOUR / run.k
        n_hours = max(1, math.ceil((run.end - run.t0) / hour_w))
        # InfusionMaxPerHour counts growing and shrinking; giving replicas
        # back to guaranteed work that waits is outside it (it must not
        # wait on the limit), so those are counted apart.
        def per_hour_of(actions):
            return [sum(1 for o in run.infusion_ops if o["action"] in actions and
                        run.t0 + h * hour_w <= o["at"] < run.t0 + (h + 1) * hour_w)
                    for h in range(n_hours)]
        per_hour = per_hour_of(("grew", "shrank"))
        gave_back = per_hour_of(("gave back",))
        out["infusion_ops_per_hour"] = per_hour
        out["infusion_ops_per_hour_max"] = max(per_hour)
        out["infusion_gave_back_per_hour_max"] = max(gave_back)
        out["infusion_ops_per_hour_mean"] = sum(per_hour) / len(per_hour)
        out["infusion_ops_total"] = len(run.infusion_ops)
        out["infusion_limit"] = run.infusion.get("max_per_hour")
    else:
        out["infusion_ops_per_hour"] = []
        out["infusion_ops_per_hour_max"] = None
        out["infusion_gave_back_per_hour_max"] = None
        out["infusion_ops_per_hour_mean"] = None
        out["infusion_ops_total"] = None
        out["infusion_limit"] = None
    out["guaranteed_peak_share"] = max(
        (values["P0"][i] + values["P1"][i]) / run.gpus_total for i in range(len(times)))

    # Waits, trace seconds.
    for tier in TIERS:
        waits = [run.trace(j["first_start"] - j["eligible"]) for j in run.jobs
                 if j["tier"] == tier and j["first_start"] is not None]
        out[f"wait_p50_{tier}"] = percentile(waits, 50)
        out[f"wait_p99_{tier}"] = percentile(waits, 99)
        out[f"waits_{tier}"] = waits
        # From submission: a P2 bid held for its market round is not
        # eligible until the round releases it, so only this counts the
        # rounds it waited (the same as the above without the market).
        sub = [run.trace(j["first_start"] - j["submit"]) for j in run.jobs
               if j["tier"] == tier and j["first_start"] is not None]
        out[f"wait_sub_p50_{tier}"] = percentile(sub, 50)
        out[f"wait_sub_p99_{tier}"] = percentile(sub, 99)
        out[f"never_started_{tier}"] = sum(1 for j in run.jobs
                                           if j["tier"] == tier and j["first_start"] is None)
    longest, never = None, False
    for j in run.jobs:
        if j["tier"] != "P3":
            continue
        w = run.trace((j["first_start"] if j["first_start"] is not None else run.end)
                      - j["eligible"])
        if longest is None or w > longest:
            longest, never = w, j["first_start"] is None
    out["p3_longest_wait"] = longest
    out["p3_longest_wait_never_started"] = never

    # Lost GPU-hours and revenue.
    lost = {t: sum(s["gpu_cards"] * run.trace(s["end"] - s["start"]) for s in run.segments
                   if s["preempted"] and s["tier"] == t) / HOUR for t in TIERS}
    out["lost_gpu_hours_by_tier"] = lost
    out["lost_gpu_hours"] = sum(lost.values())
    out["lost_gpu_hours_P2"], out["lost_gpu_hours_P3"] = lost["P2"], lost["P3"]
    rev = {t: sum(b["amount_micros"] for b in run.bills if b["tier"] == t) * k / 1e6 for t in TIERS}
    out["revenue_by_tier"] = rev
    out["revenue"] = sum(b["amount_micros"] for b in run.bills) * k / 1e6
    out["revenue_P2"] = rev["P2"]
    section9(run, out, jobs_by_id)
    out["jobs"] = len(run.jobs)
    out["segments"] = len(run.segments)
    out["unknown_jobs_in_segments"] = sum(1 for s in run.segments if s["job_id"] not in jobs_by_id)
    return out


def _workload(run: Run):
    """The workload the run replayed (trace time), or None; read once per
    run (submission_lag and section9 both need it)."""
    if not hasattr(run, "_workload_jobs"):
        run._workload_jobs = _read_workload(run)
    return run._workload_jobs


def _read_workload(run: Run):
    name = run.meta.get("workload")
    if not name:
        return None
    path = name if os.path.isabs(name) else os.path.join(run.dir, name)
    try:
        from tools.replay.workload import read_csv
        if os.path.exists(path):
            return read_csv(path)
        if not os.path.exists(path + ".gz"):
            return None
        import gzip
        import tempfile
        with gzip.open(path + ".gz", "rb") as src, tempfile.NamedTemporaryFile() as tmp:
            tmp.write(src.read())
            tmp.flush()
            return read_csv(tmp.name)
    except (OSError, ValueError):
        return None


def section9(run: Run, out: Dict[str, object], jobs_by_id: Dict[str, Dict]) -> None:
    """Section 9's KPIs as tools/replay/kpi.py defines them (trace time,
    the SLA in wall seconds)."""
    submitted = {jid: j["tier"] for jid, j in jobs_by_id.items()}
    workload = _workload(run)
    # The SLA, every guaranteed submission: those Slurm refused (run.json's
    # "refused", tiers from the workload) are missed.
    refused = run.meta.get("refused") or {}
    tier_of = {w.name: w.tier for w in workload} if workload else {}
    table = [dict(j, refused=False) for j in run.jobs]
    submit_of = {w.name: w.submit for w in workload} if workload else {}
    table += [{"tier": tier_of.get(name, "?"), "eligible": run.t0, "first_start": None,
               "held_reason": "", "refused": True} for name in refused
              if run.origin + submit_of.get(name, 0.0) / run.k >= run.t0]
    for tier in ("P0", "P1"):
        s = kpi.sla(table, tier, run.sla, run.end)
        out[f"{tier.lower()}_sla_every"] = s["attainment"]
        out[f"{tier.lower()}_sla_refused"] = sum(1 for j in table if j["refused"] and
                                                 j["tier"] == tier)
    out["sla_refused_unknown_tier"] = sum(1 for j in table if j["refused"] and j["tier"] == "?")
    # P2 run length before interruption (submitted and ran as P2).
    p2 = kpi.p2_interruption([{"submitted": submitted.get(s["job_id"]), "tier": s["tier"],
                               "length": run.trace(run.clip(s["start"], s["end"])),
                               "preempted": s["preempted"]} for s in run.segments])
    out["p2_run_per_preemption_h"] = p2["run_hours_per_preemption"]
    out["p2_run_lower_bound_h"] = p2["run_hours_lower_bound"]
    out["p2_run_km_h"] = p2["km_restricted_mean_h"]
    out["p2_run_censored"] = p2["censored"]
    out["p2_run_preemptions"] = p2["preemptions"]
    # P3 preemption rate by submitted tier, trace hours.
    trace_end = run.trace(run.end - run.t0)
    p3 = kpi.p3_rate_by_hour(
        [{"job_id": j["job_id"], "tier": j["tier"], "eligible": run.trace(j["eligible"] - run.t0),
          "first_start": (run.trace(j["first_start"] - run.t0)
                          if j["first_start"] is not None else None)}
         for j in run.all_jobs or run.jobs],
        [{"job_id": s["job_id"], "start": run.trace(s["start"] - run.t0),
          "end": run.trace(s["end"] - run.t0), "preempted": s["preempted"]}
         for s in run.segments], 0.0, trace_end)
    out["p3_rate_submitted_by_hour"] = [h["rate"] for h in p3["hours"]]
    out["p3_hours_submitted"] = p3["hours"]
    out["p3_rate_submitted_mean"] = p3["mean"]
    out["p3_rate_submitted_worst"] = p3["worst"]
    out["p3_rate_submitted_worst_busy"] = p3["worst_busy"]
    out["p3_rate_submitted_pooled"] = p3["pooled"]
    out["p3_empty_hours"] = p3["empty_hours"]
    out["p3_never_started"] = p3["never_started"]
    # Utilisation beside its ceiling, and goodput.
    u = kpi.utilisation(
        [{"start": s["start"], "end": s["end"], "gpus": s["gpu_cards"], "preempted": s["preempted"]}
         for s in run.segments if s["tier"] in TIERS],
        [{"start": r["start"], "end": r["end"], "gpus": r["gpu_cards"]} for r in run.replicas],
        run.gpus_total, run.t0, run.end)
    out["goodput"] = u["goodput"]
    # The workload as the replay runs it: a fractional GPU on a whole card,
    # no job shorter than one wall second (planc-replay's sbatch_args).
    # The ceiling on the run's nodes (run.json's "nodes"; a run without it
    # gets the pool's), and the looser one over a single pool of GPUs.
    as_run = [{"submit": w.submit, "duration": max(w.duration, run.k),
               "gpus": math.ceil(w.gpus) if w.gpus > 0 else 0} for w in workload or []]
    window = (run.trace(run.t0 - run.origin), run.trace(run.end - run.origin))
    nodes = run.meta.get("nodes")
    ceiling = (kpi.greedy_ceiling(as_run, run.gpus_total, *window,
                                  gpus_per_node=run.gpus_total / nodes if nodes else None)
               if workload else None)
    out["utilisation_ceiling"] = ceiling
    out["utilisation_ceiling_pool"] = (kpi.greedy_ceiling(as_run, run.gpus_total, *window)
                                       if workload else None)
    # The ceiling is the workload's: replicas (shown apart) are not in it.
    out["utilisation_of_ceiling"] = u["workload"] / ceiling if ceiling else None
    # What slurmctld's own pace cost: the start lateness (kpi.start_lateness).
    late = start_lateness(run)
    by = late["by"] if late else {}
    for who in ("main", "backfill"):
        out[f"start_lateness_{who}_s"] = by[who]["mean_s"] if who in by else None
    out["start_lateness_share"] = (late["gpu_seconds"] / (run.gpus_total * (run.end - run.t0))
                                   if late else None)


# --- slurmctld's log: when each job could start and when it did ------------

_LOG_LINE = re.compile(r"\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)\] (.*)")
_LOG_EVENTS = (
    ("start", "main", re.compile(r"^sched: Allocate JobId=(\d+) NodeList=(\S+)")),
    ("start", "backfill", re.compile(r"^sched/backfill: _start_job: Started JobId=(\d+) in \S+ on (\S+)")),
    ("free", None, re.compile(r"^_job_complete: JobId=(\d+) done")),
    ("free", None, re.compile(r"^Requeuing JobId=(\d+)")),
    # a run past its time limit: slurmctld kills it without a _job_complete line
    ("free", None, re.compile(r"^Time limit exhausted for JobId=(\d+)")),
    ("submit", None, re.compile(r"^_slurm_rpc_submit_batch_job: JobId=(\d+) ")),
)
# preempt/planc's own line, written when a preemption starts (Slurm's
# comes at the end of the victim's grace).
# (%pJ writes an array task as JobId=<array>_<task>(<job id>).)
_LOG_PLANC_PREEMPTS = re.compile(
    r"^preempt/planc: JobId=(?:\d+_\d+\()?(\d+)\)? \(P\d\) preempted by JobId=(\d+)")
# Slurm's own line for every preemption that took effect (preempt.c), under
# stock preempt/qos as under preempt/planc: victim, then preemptor.
_LOG_PREEMPTED = re.compile(
    r"^preempted JobId=(\d+) has been (?:requeued|killed) to reclaim resources for JobId=(\d+)")


def expand_nodes(node_list: str) -> List[str]:
    """Slurm's host list as slurmctld logs it: gpu3, gpu[1-2,5]."""
    out: List[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?", node_list):
        prefix, ranges = m.group(1), m.group(2)
        if ranges is None:
            out.append(prefix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            width = len(lo)
            for i in range(int(lo), int(hi or lo) + 1):
                out.append(f"{prefix}{i:0{width}d}")
    return out


def log_events(run: Run) -> Optional[List[Dict]]:
    """The job starts, ends and requeues in the run's slurmctld.log(.gz),
    in log order, as kpi.start_lateness reads them (plus each one's
    "job_id"), or None when the log was not kept.  The log's times are
    slurmctld's local time; the offset to the run's epoch seconds is taken
    from the submissions both record (jobs.csv's submit), to the nearest
    quarter hour."""
    if hasattr(run, "_log_events"):
        return run._log_events
    path = os.path.join(run.dir, "slurmctld.log")
    opener = open
    if not os.path.exists(path):
        path += ".gz"
        opener = gzip.open
    run._log_events = None
    if not os.path.exists(path):
        return None
    import datetime
    jobs = {str(j["job_id"]): j for j in (run.all_jobs or run.jobs)}
    events: List[Dict] = []
    preemptions: List[Dict] = []
    started: List[Dict] = []  # preempt/planc's preemption starts
    nodes_of: Dict[str, List[str]] = {}
    offset = None

    def when(m: "re.Match") -> float:  # the line's time, read as UTC
        return datetime.datetime.fromisoformat(m.group(1)).replace(
            tzinfo=datetime.timezone.utc).timestamp()

    with opener(path, "rt", errors="replace") as f:
        for line in f:
            m = _LOG_LINE.match(line)
            if not m:
                continue
            p = _LOG_PLANC_PREEMPTS.match(m.group(2))
            if p:
                started.append({"time": when(m), "job_id": p.group(1), "by": p.group(2)})
                continue
            p = _LOG_PREEMPTED.match(m.group(2))
            if p:
                t = when(m)
                preemptions.append({"time": t, "job_id": p.group(1), "by": p.group(2)})
                # a victim that may not be requeued is killed: no other line frees it
                if p.group(0).find("has been killed") >= 0 and p.group(1) in nodes_of:
                    events.append({"kind": "free", "time": t, "nodes": nodes_of[p.group(1)],
                                   "job_id": p.group(1)})
                continue
            for kind, by, pat in _LOG_EVENTS:
                e = pat.match(m.group(2))
                if not e:
                    continue
                t = when(m)
                jid = e.group(1)
                if kind == "submit":
                    if offset is None and jid in jobs and jobs[jid].get("submit"):
                        offset = round((jobs[jid]["submit"] - t) / 900.0) * 900.0
                elif kind == "start":
                    nodes_of[jid] = expand_nodes(e.group(2))
                    j = jobs.get(jid)
                    events.append({"kind": "start", "time": t, "nodes": nodes_of[jid], "by": by,
                                   "job_id": jid, "eligible": j["eligible"] if j else None,
                                   "gpus": math.ceil(j["gpus"]) if j and j["gpus"] else 0})
                elif jid in nodes_of:
                    events.append({"kind": "free", "time": t, "nodes": nodes_of[jid],
                                   "job_id": jid})
                break
    if offset is None:
        return None
    for e in events + preemptions + started:
        e["time"] += offset
    run._log_events = events
    run._log_preemptions = preemptions
    run._log_preemption_starts = started
    return events


def log_preemptions(run: Run) -> Optional[List[Dict]]:
    """Every preemption slurmctld's log records (Slurm's own line), in log
    order: {"time" (the run's epoch seconds), "job_id" (the victim), "by"
    (the preemptor)}; None when the log was not kept."""
    if log_events(run) is None:
        return None
    return run._log_preemptions


def preemption_starts(run: Run) -> Optional[List[Dict]]:
    """When each preemption started, as log_preemptions' entries: from
    preempt/planc's own line where the log has it; otherwise (stock) from
    Slurm's, which comes at the end of the victim's grace, less
    run.json's P2GraceTime for a victim submitted as P2.  None without
    the log."""
    if log_events(run) is None:
        return None
    if run._log_preemption_starts:
        return run._log_preemption_starts
    grace = float((run.meta.get("clocks") or {}).get("P2GraceTime") or 0)
    jobs = {str(j["job_id"]): j for j in (run.all_jobs or run.jobs)}
    return [dict(p, time=p["time"] - (grace if jobs.get(p["job_id"], {}).get("tier") == "P2"
                                       else 0.0))
            for p in run._log_preemptions]


def nodes_being_cleared(run: Run, at: float, but: str, slack: float = 10.0) -> set:
    """The nodes other preemptors than `but` were clearing at `at`: those
    their victims held when preempted, for each preemption started at or
    before `at`, no longer ago than P2GraceTime + `slack` seconds, whose
    preemptor had not started since (from slurmctld's log; empty without
    it).  A preemptor running at `at`, or not named (0), clears nothing;
    the age bound drops preemptors that were cancelled or called off."""
    events = log_events(run)
    starts = preemption_starts(run)
    if events is None or starts is None:
        return set()
    starts_of: Dict[str, List[Tuple[float, List[str]]]] = {}
    running = set()
    for e in events:
        if e["kind"] == "start":
            starts_of.setdefault(e["job_id"], []).append((e["time"], e["nodes"]))
        if e["time"] <= at:
            (running.add if e["kind"] == "start" else running.discard)(e["job_id"])
    oldest = at - float((run.meta.get("clocks") or {}).get("P2GraceTime") or 0) - slack
    out = set()
    for p in starts:
        if p["by"] in (but, "0") or not oldest <= p["time"] <= at or p["by"] in running:
            continue
        if any(p["time"] <= t <= at for t, _ in starts_of.get(p["by"], [])):
            continue  # its preemptor started: the nodes are its own now
        held = [n for t, n in starts_of.get(p["job_id"], []) if t <= p["time"]]
        if held:
            out.update(held[-1])
    return out


def worst_p3_hours(run: Run, k: Dict[str, object], n: int = 3) -> List[Dict[str, object]]:
    """The n worst hours of the P3 preemption rate by submitted tier, each
    with the preemptions that made it: per preemptor (job, submitted tier,
    GPUs) its P3 victims (job, GPUs), from slurmctld's log (the preemption
    nearest each preempted run's end).  Empty without the log."""
    preemptions = log_preemptions(run)
    hours = [h for h in k.get("p3_hours_submitted") or [] if h["rate"] is not None]
    if preemptions is None or not hours:
        return []
    jobs = {str(j["job_id"]): j for j in (run.all_jobs or run.jobs)}
    by_victim: Dict[str, List[Dict]] = {}
    for p in preemptions:
        by_victim.setdefault(p["job_id"], []).append(p)
    out = []
    for h in sorted(hours, key=lambda x: (-x["rate"], x["hour"]))[:n]:
        a, b = h["hour"] * HOUR, (h["hour"] + 1) * HOUR
        takers: Dict[str, List[str]] = {}
        first_at: Dict[str, float] = {}  # a preemptor's first P3 victim of the hour
        for s in run.segments:
            j = jobs.get(str(s["job_id"]))
            if not s["preempted"] or not j or j["tier"] != "P3":
                continue
            if not a < run.trace(s["end"] - run.t0) <= b:
                continue
            near = min(by_victim.get(str(s["job_id"]), []),
                       key=lambda p: abs(p["time"] - s["end"]), default=None)
            takers.setdefault(near["by"] if near else "?", []).append(str(s["job_id"]))
            if near:
                first_at[near["by"]] = min(first_at.get(near["by"], near["time"]), near["time"])
        out.append({"hour": h["hour"], "preempted": h["preempted"], "ran": h["ran"],
                    "rate": h["rate"], "by": [
                        {"job_id": by, "tier": jobs[by]["tier"] if by in jobs else "?",
                         "gpus": jobs[by]["gpus"] if by in jobs else None,
                         "victims": [(v, jobs[v]["gpus"]) for v in sorted(vs, key=int)],
                         "fewest_p3": fewest_p3_to_clear(run, by, first_at[by])
                         if by in first_at else None}
                        for by, vs in sorted(takers.items())]})
    return out


def fewest_p3_to_clear(run: Run, preemptor: str, at: float,
                       gpus_per_node: Optional[int] = None) -> Optional[int]:
    """For a guaranteed job that needs whole nodes (gpus_per_node GPUs or
    more) and preempted at `at`: the fewest P3-counted runs (by submitted
    tier) that any set of nodes it could have cleared held then, from
    slurmctld's log.  A node can be cleared when no P0/P1 job runs on it,
    no P2 job on it has reached the preemption cap (run.json's clocks:
    PreemptWindow, and 3 preemptions; stock has no cap), and no other
    preemptor is clearing it (nodes_being_cleared).  Cores and memory
    are not looked at.  None when it is no such job, the log was not kept,
    or fewer such nodes existed than it needs."""
    events = log_events(run)
    if events is None:
        return None
    jobs = {str(j["job_id"]): j for j in (run.all_jobs or run.jobs)}
    j = jobs.get(preemptor)
    nodes_total = run.meta.get("nodes")
    if gpus_per_node is None:
        if not nodes_total:
            return None
        gpus_per_node = int(run.gpus_total // int(nodes_total))
    if not j or j["tier"] not in ("P0", "P1") or (j["gpus"] or 0) < gpus_per_node:
        return None
    need = math.ceil(j["gpus"] / gpus_per_node - 1e-9)
    window = (run.meta.get("clocks") or {}).get("PreemptWindow")
    capped_by = set()
    if window and run.config != "stock":
        recent: Dict[str, int] = {}
        for p in log_preemptions(run):
            if at - window < p["time"] < at:
                recent[p["job_id"]] = recent.get(p["job_id"], 0) + 1
        capped_by = {v for v, c in recent.items() if c >= 3}
    running: Dict[str, List[str]] = {}
    all_nodes = set()
    for e in events:
        all_nodes.update(e["nodes"])
        if e["time"] > at:
            continue
        if e["kind"] == "start":
            running[e["job_id"]] = e["nodes"]
        else:
            running.pop(e["job_id"], None)
    # A node no run of the log was on is empty (the replay's nodes are
    # gpu1..gpuN).
    per_node: Dict[str, List[str]] = {n: [] for n in all_nodes}
    for i in range(1, int(nodes_total or 0) + 1):
        per_node.setdefault(f"gpu{i}", [])
    for jid, nodes in running.items():
        if jid == preemptor:
            continue
        for n in nodes:
            per_node.setdefault(n, []).append(jid)
    taken = nodes_being_cleared(run, at, preemptor)
    p3_counts = []
    for n, held in per_node.items():
        if n in taken:
            continue
        tiers = [jobs[x]["tier"] if x in jobs else "?" for x in held]
        if any(t in ("P0", "P1", "?") for t in tiers) or any(x in capped_by for x in held):
            continue
        p3_counts.append(sum(1 for t in tiers if t == "P3"))
    if len(p3_counts) < need:
        return None
    return sum(sorted(p3_counts)[:need])


def p3_takes(run: Run) -> Optional[List[Dict]]:
    """The preemptions (log_preemptions) in the run's window whose victim
    was submitted as P3 (free attempts included); None without the log."""
    pre = log_preemptions(run)
    if pre is None:
        return None
    jobs = {str(j["job_id"]): j for j in (run.all_jobs or run.jobs)}
    return [p for p in pre if p["job_id"] in jobs and jobs[p["job_id"]]["tier"] == "P3"
            and run.t0 <= p["time"] <= run.end]


def whole_node_p3_takes(run: Run) -> Optional[Dict[str, int]]:
    """Guaranteed jobs that need whole nodes and preempted P3-counted runs
    (by submitted tier) in the run's window: how many such preemptors,
    the P3 runs they took, and the fewest they could have (the sum of
    fewest_p3_to_clear at each one's first P3 victim; preemptors for which
    it is not known are left out of all three).  None without the log."""
    takes = p3_takes(run)
    if takes is None:
        return None
    first: Dict[str, float] = {}
    taken: Dict[str, int] = {}
    for p in takes:
        first[p["by"]] = min(first.get(p["by"], p["time"]), p["time"])
        taken[p["by"]] = taken.get(p["by"], 0) + 1
    out = {"preemptors": 0, "taken": 0, "fewest": 0}
    for by, at in first.items():
        fewest = fewest_p3_to_clear(run, by, at)
        if fewest is None:
            continue
        out["preemptors"] += 1
        out["taken"] += taken[by]
        out["fewest"] += fewest
    return out


def repeated_p3_takes(run: Run, gap: float = 0.5) -> Optional[Dict[str, object]]:
    """Preemptors that took P3 runs (by submitted tier) in more than one
    round while waiting once (between two of their starts, or before the
    first): rounds are preemptions more than `gap` seconds apart, from
    Slurm's own preemption line in slurmctld's log (P3 runs have no grace,
    so the line is written as the decision is taken, under stock
    preempt/qos as under preempt/planc).  The runs an earlier round took
    freed GPUs the preemptor did not start on.  Returns {"waits": waits
    that took P3 runs in the run's window, "repeats": [{"job_id", "tier",
    "rounds": [(seconds after the first round, P3 runs taken)]}],
    "earlier": P3 runs taken in rounds before a wait's last}; None without
    the log."""
    takes = p3_takes(run)
    if takes is None:
        return None
    jobs = {str(j["job_id"]): j for j in (run.all_jobs or run.jobs)}
    # per preemptor, its P3 takes and its starts, in time order
    timeline_of: Dict[str, List[Tuple[float, int]]] = {}  # (time, 1 take / 0 start)
    for p in takes:
        timeline_of.setdefault(p["by"], []).append((p["time"], 1))
    for e in log_events(run):
        if e["kind"] == "start" and e["job_id"] in timeline_of:
            timeline_of[e["job_id"]].append((e["time"], 0))
    out: Dict[str, object] = {"waits": 0, "repeats": [], "earlier": 0}
    for by in sorted(timeline_of, key=int):
        waits: List[List[float]] = [[]]
        for t, take in sorted(timeline_of[by]):
            if take:
                waits[-1].append(t)
            elif waits[-1]:
                waits.append([])
        for w in waits:
            if not w:
                continue
            out["waits"] += 1
            rounds: List[List[float]] = []
            for t in w:
                if rounds and t - rounds[-1][-1] <= gap:
                    rounds[-1].append(t)
                else:
                    rounds.append([t])
            if len(rounds) > 1:
                out["repeats"].append({
                    "job_id": by, "tier": jobs[by]["tier"] if by in jobs else "?",
                    "rounds": [(round(r[0] - w[0], 1), len(r)) for r in rounds]})
                out["earlier"] += sum(len(r) for r in rounds[:-1])
    return out


def guaranteed_spread(run: Run, gpus_per_node: int = 8) -> Optional[Dict[str, object]]:
    """At each submission of a guaranteed (P0/P1) job that needs whole
    nodes (gpus_per_node GPUs or more): how many nodes held guaranteed work
    then, from slurmctld's log (its starts and ends), and how few would
    have held it packed (a node one job holds whole as it is, the others'
    GPUs gpus_per_node to a node).  Guaranteed work is never preempted, so
    only the other nodes can be cleared for such a job.  None without the
    log."""
    events = log_events(run)
    if events is None:
        return None
    jobs = {str(j["job_id"]): j for j in (run.all_jobs or run.jobs)}
    guaranteed = {i for i, j in jobs.items() if j["tier"] in ("P0", "P1")}
    due = sorted((j["submit"], i) for i, j in jobs.items() if i in guaranteed
                 and (j["gpus"] or 0) >= gpus_per_node and j.get("submit") is not None)
    held: Dict[str, Dict[str, float]] = {}  # node -> guaranteed job -> GPUs
    holding, packed = [], []

    def look():
        share = [sum(g.values()) for g in held.values() if g]
        holding.append(len(share))
        whole = sum(1 for x in share if x >= gpus_per_node)
        packed.append(whole + math.ceil(sum(x for x in share if x < gpus_per_node)
                                        / gpus_per_node - 1e-9))
    i = 0
    for e in events:
        while i < len(due) and due[i][0] < e["time"]:
            look()
            i += 1
        if e["job_id"] not in guaranteed:
            continue
        for n in e["nodes"]:
            if e["kind"] == "start":
                gpus = jobs[e["job_id"]]["gpus"] or 0
                held.setdefault(n, {})[e["job_id"]] = gpus / len(e["nodes"])
            else:
                held.get(n, {}).pop(e["job_id"], None)
    while i < len(due):
        look()
        i += 1
    return {"submissions": len(due), "holding_mean": _mean(holding),
            "packed_mean": _mean(packed)}


def start_lateness(run: Run) -> Optional[Dict[str, object]]:
    """kpi.start_lateness over the run's slurmctld log (log_events), or
    None when it was not kept."""
    events = log_events(run)
    return kpi.start_lateness(events, run.t0, run.end) if events is not None else None


# A run slurmdbd never recorded: preempted this soon after its start.
# slurmctld sends a run's start to slurmdbd from a thread that wakes every
# 5 s (accounting_storage/slurmdbd, _set_db_inx_thread); a requeue before
# slurmdbd has answered with the run's record index starts the job's next
# record over it (job_mgr.c, batch_requeue_fini).  Seen: runs of 1-10 s
# under the replay's load; 15 s leaves slurmdbd's round trip some room.
LOST_RUN_SECONDS = 15


def slurmdbd_lost_runs(run: Run) -> set:
    """(job id, start) of the bills slurmdbd has no run for that are runs
    slurmdbd loses: preempted within LOST_RUN_SECONDS of their start, billed
    at zero, and started by slurmctld at that second by its own log (backfill
    starts a job, a pending preemptor takes its GPUs the next pass, and
    slurmdbd keeps only the job's next run).  Without the log, none."""
    events = log_events(run)
    if not events:
        return set()
    started = {}
    for e in events:
        if e["kind"] == "start":
            started.setdefault(e["job_id"], []).append(e["time"])
    dbd = {(s["job_id"], int(round(s["start"]))) for s in run.sacct}
    lost = set()
    for b in run.segments:
        key = (b["job_id"], int(round(b["start"])))
        if key in dbd or not b["preempted"] or b["amount_micros"] != 0:
            continue
        if b["end"] - b["start"] > LOST_RUN_SECONDS:
            continue
        if any(abs(t - b["start"]) <= 1.0 for t in started.get(b["job_id"], [])):
            lost.add(key)
    return lost


# --- consistency -----------------------------------------------------------


def check_consistency(run_dir: str) -> List[str]:
    """Everything that does not add up in a run directory, as sentences.
    Empty when the run is complete and internally consistent."""
    try:
        run = Run(run_dir)
    except Problem as e:
        return [str(e)]
    problems = list(run.problems)
    if run.config not in CONFIG_ORDER:
        problems.append(f"run.json: config {run.config!r} is not one of {', '.join(CONFIG_ORDER)}")

    # Jobs.
    names, ids = set(), set()
    for j in run.jobs:
        if j["name"] in names:
            problems.append(f"jobs.csv: job name {j['name']} twice")
        if j["job_id"] in ids:
            problems.append(f"jobs.csv: job id {j['job_id']} twice")
        names.add(j["name"])
        ids.add(j["job_id"])
        if j["tier"] not in TIERS:
            problems.append(f"jobs.csv: job {j['name']}: tier {j['tier']!r} is not P0..P3")
        # Slurm keeps whole seconds; the driver's submit may be a fraction later.
        if j["eligible"] < j["submit"] - 1:
            problems.append(f"jobs.csv: job {j['name']}: eligible before it was submitted")
        if j["first_start"] is not None and j["first_start"] < j["eligible"] - 1:
            problems.append(f"jobs.csv: job {j['name']}: started before it was eligible")
        if j["first_start"] is not None and j["end"] is not None and j["end"] < j["first_start"]:
            problems.append(f"jobs.csv: job {j['name']}: ends before it starts")
    workload = run.meta.get("workload")
    if workload:
        # A submission Slurm refused (run.json's "refused": name ->
        # sbatch's message) has no job id, so no row: counted there.
        refused = run.meta.get("refused") or {}
        jobs = _read_workload(run)
        if jobs is None:
            problems.append(f"workload {workload}: missing or unreadable")
        else:
            missing = [w.name for w in jobs if w.name not in names and w.name not in refused]
            if missing:
                problems.append(f"{len(missing)} job(s) of the workload missing from jobs.csv: "
                                + ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else ""))

    # Bills, one by one.
    by_job: Dict[str, List[Dict]] = {}
    bills_per_job: Dict[str, int] = {}
    last_bill: Dict[str, Dict] = {}
    for b in run.bills:
        bills_per_job[b["job_id"]] = bills_per_job.get(b["job_id"], 0) + 1
        if b["job_id"] not in last_bill or b["segment"] > last_bill[b["job_id"]]["segment"]:
            last_bill[b["job_id"]] = b
        key = f"job {b['job_id']} segment {b['segment']}"
        if b["end"] < b["start"]:
            problems.append(f"segments.csv: {key} ends before it starts")
        if b["tier"] not in TIERS:
            problems.append(f"segments.csv: {key}: tier {b['tier']!r} is not P0..P3")
        if b["amount_micros"] < 0:
            problems.append(f"segments.csv: {key}: negative amount")
        if b["amount_micros"] == 0 and not b["zero_reason"]:
            problems.append(f"segments.csv: {key}: a bill of 0 without a zero_reason")
        if b["zero_reason"] == NEVER_RAN:
            continue
        expect = b["gpu_cards"] * (b["end"] - b["start"])
        if abs(b["card_seconds"] - expect) > b["gpu_cards"] + 1e-6:
            problems.append(f"segments.csv: {key}: card_seconds {b['card_seconds']:g} but "
                            f"gpu_cards x length = {expect:g}")
        if b["start"] < run.t0 - 1:
            problems.append(f"segments.csv: {key} starts before t0")
        if b["job_id"] not in ids:
            problems.append(f"segments.csv: {key}: job id not in jobs.csv")
        by_job.setdefault(b["job_id"], []).append(b)

    # Runs slurmdbd loses (slurmdbd_lost_runs) are not problems: slurmdbd's
    # first start and run count leave them out.
    lost = slurmdbd_lost_runs(run)

    # Bills against jobs: segment numbers, overlaps, first start, restarts.
    for j in run.jobs:
        segs = sorted(by_job.get(j["job_id"], []), key=lambda s: s["start"])
        # One bill per run, plus a "never ran" one when a job ends pending
        # (cancelled at the end of the replay, say): restarts + 1 in all.
        n_bills = bills_per_job.get(j["job_id"], 0)
        # A run requeued and cancelled before slurmdbd had the requeued
        # job's record (the replay's cancel at the window's end, within a
        # second of the requeue): sacct's last record is the preempted run
        # and counts one restart fewer; the "never ran" bill is the
        # cancelled pending job.
        requeued_unrecorded = (j["final_state"] == "PREEMPTED"
                               and j["job_id"] in last_bill
                               and last_bill[j["job_id"]]["zero_reason"] == NEVER_RAN
                               and n_bills == j["restarts"] + 2)
        if j["final_state"] not in ("PENDING", "RUNNING", "REQUEUED") and \
                n_bills != j["restarts"] + 1 and not requeued_unrecorded:
            problems.append(f"job {j['name']}: {n_bills} bill(s) but Slurm's restart count "
                            f"{j['restarts']} says {j['restarts'] + 1}")
        if j["first_start"] is None:
            if segs:
                problems.append(f"job {j['name']}: never started in jobs.csv but has run segments")
            continue
        if not segs:
            problems.append(f"job {j['name']}: started but has no bill")
            continue
        first = [x for x in segs if (x["job_id"], int(round(x["start"]))) not in lost] or segs
        if abs(first[0]["start"] - j["first_start"]) > 1:
            problems.append(f"job {j['name']}: first start {j['first_start']:.0f} but its first "
                            f"bill starts at {first[0]['start']:.0f}")
        numbers = sorted(s["segment"] for s in segs)
        if len(set(numbers)) != len(numbers):
            problems.append(f"job {j['name']}: a segment number billed twice: {numbers}")
        for a, b in zip(segs, segs[1:]):
            if b["start"] < a["end"]:
                problems.append(f"job {j['name']}: segments {a['segment']} and {b['segment']} overlap")

    # Bills against slurmdbd: the same runs, by job and start, same end and state.
    bills = {(s["job_id"], int(round(s["start"]))): s for s in run.segments}
    dbd = {(s["job_id"], int(round(s["start"]))): s for s in run.sacct}
    if len(bills) != len(run.segments):
        problems.append("segments.csv: two bills with the same job and start")
    if len(dbd) != len(run.sacct):
        problems.append("sacct_segments.csv: two runs with the same job and start")
    for key in sorted(set(bills) - set(dbd) - lost):
        problems.append(f"run of job {key[0]} started {key[1]}: billed, not in slurmdbd")
    for key in sorted(set(dbd) - set(bills)):
        problems.append(f"run of job {key[0]} started {key[1]}: in slurmdbd, not billed")
    for key in sorted(set(bills) & set(dbd)):
        b, d = bills[key], dbd[key]
        if abs(b["end"] - d["end"]) > 1:
            problems.append(f"run of job {key[0]} started {key[1]}: bill ends {b['end']:.0f}, "
                            f"slurmdbd {d['end']:.0f}")
        if b["state"] != d["state"]:
            problems.append(f"run of job {key[0]} started {key[1]}: bill says {b['state']}, "
                            f"slurmdbd {d['state']}")
    if len(run.segments) - len(lost) != len(run.sacct):
        problems.append(f"{len(run.segments)} run segments billed ({len(lost)} of them runs "
                        f"slurmdbd loses), {len(run.sacct)} in slurmdbd")

    # GPU-seconds add up: per tier, bills' card_seconds = cards x length =
    # the allocation timeline's integral (window-clipped), and the tiers sum
    # to the total; the pool is never over-allocated.
    times, values = timeline(run)
    gsec = timeline_gpu_seconds(times, values)
    for tier in TIERS:
        segs = [s for s in run.segments if s["tier"] == tier and s["end"] >= s["start"]]
        billed = sum(s["card_seconds"] for s in segs)
        length = sum(s["gpu_cards"] * (s["end"] - s["start"]) for s in segs)
        clipped = sum(s["gpu_cards"] * run.clip(s["start"], s["end"]) for s in segs)
        if abs(billed - length) > sum(s["gpu_cards"] for s in segs) + 1e-6:
            problems.append(f"{tier}: bills' card-seconds {billed:g} != gpu_cards x length {length:g}")
        if abs(gsec[tier] - clipped) > 1e-6 * max(1.0, clipped):
            problems.append(f"{tier}: allocation timeline {gsec[tier]:g} GPU-s != segments {clipped:g}")
    total_clipped = sum(s["gpu_cards"] * run.clip(s["start"], s["end"]) for s in run.segments
                        if s["tier"] in TIERS and s["end"] >= s["start"])
    if abs(sum(gsec.values()) - total_clipped) > 1e-6 * max(1.0, total_clipped):
        problems.append("tiers' GPU-seconds do not add up to the total")
    for i, t in enumerate(times):
        used = sum(values[tier][i] for tier in TIERS)
        if used > run.gpus_total + 1e-6:
            problems.append(f"{used:g} GPUs allocated at {t:.0f}, the pool has {run.gpus_total:g}")
            break
    return problems


# --- comparison -----------------------------------------------------------

# (key, label, kind, target, alert): kind "ratio" prints %, "hours", "count",
# "seconds" (trace), "money".  target/alert: (op, value) or None; the
# sources are the Alerts table of docs/metrics-and-alerts.md (policy section 9).
KPIS = (
    ("p0_sla_every", "P0 SLA attainment, every submission (start <= 40 s wall)", "ratio",
     (">=", 0.999), ("<", 0.995)),
    ("p1_sla_every", "P1 SLA attainment, every submission (start <= 40 s wall)", "ratio",
     (">=", 0.999), ("<", 0.995)),
    ("p0_sla_refused", "P0 submissions Slurm refused (missed)", "count", None, None),
    ("p1_sla_refused", "P1 submissions Slurm refused (missed)", "count", None, None),
    ("p0_sla", "P0 SLA, started jobs (planc-exporter's metric)", "ratio", None, None),
    ("p1_sla", "P1 SLA, started jobs (planc-exporter's metric)", "ratio", None, None),
    ("p0_never_started", "P0 jobs never started", "count", None, None),
    ("p1_never_started", "P1 jobs never started", "count", None, None),
    ("p2_run_per_preemption_h", "P2 mean run before interruption: P2 run-hours per preemption",
     "hours", (">=", 4.0), ("<", 2.0)),
    ("p2_run_km_h", "P2 run before interruption, Kaplan-Meier mean restricted to 24 h", "hours",
     None, None),
    ("p2_run_lower_bound_h", "P2 run-hours without any interruption (a lower bound)", "hours",
     None, None),
    ("p2_mean_run_h", "P2 mean segment (every P2 segment; not section 9's)", "hours", None,
     None),
    ("p3_rate_submitted_mean", "P3 preemption rate, mean hour (by submitted tier)", "ratio",
     ("<=", 0.10), (">", 0.20)),
    ("p3_rate_submitted_worst", "P3 preemption rate, worst hour (by submitted tier)", "ratio",
     ("<=", 0.10), (">", 0.20)),
    ("p3_rate_submitted_worst_busy",
     f"P3 preemption rate, worst hour of those with {kpi.MIN_P3_RUNS}+ P3 runs (not a target)",
     "ratio", None, None),
    ("p3_rate_submitted_pooled",
     "P3 preemption rate, the window's preemptions over its hourly runs (not a target)",
     "ratio", None, None),
    ("p3_empty_hours", "Trace hours without any P3 run (no rate)", "count", None, None),
    ("p3_never_started", "P3 jobs never started", "count", None, None),
    ("p2_preempt_24h_max", "Preemptions per P2 job in 24 h, max", "count", ("<=", 3), (">", 5)),
    ("p2_preempt_24h_p99", "Preemptions per P2 job in 24 h, p99", "count", ("<=", 3), (">", 5)),
    ("utilisation", "GPU utilisation", "ratio", (">=", 0.80), ("<", 0.60)),
    ("utilisation_ceiling", "GPU utilisation an ideal greedy schedule reaches on the same nodes "
     "(ceiling)", "ratio", None, None),
    ("utilisation_ceiling_pool", "The same over one pool of GPUs, jobs straddling nodes (looser; "
     "not the ceiling)", "ratio", None, None),
    ("utilisation_of_ceiling", "GPU utilisation by the workload's jobs over the ceiling", "ratio",
     None, None),
    ("goodput", "Goodput (without preempted runs and replicas)", "ratio", None, None),
    ("start_lateness_share", "GPU time idle before slurmctld started a job that could start "
     "(start lateness, share of the pool)", "ratio", None, None),
    ("start_lateness_main_s", "Start lateness, main scheduler, mean (wall seconds)", "number",
     None, None),
    ("start_lateness_backfill_s", "Start lateness, backfill, mean (wall seconds)", "number",
     None, None),
    ("utilisation_workload", "GPU utilisation, the workload's jobs alone", "ratio", None, None),
    ("utilisation_replicas", "GPU utilisation, infused replicas", "ratio", None, None),
    ("infusion_ops_per_hour_max", "Infusion grow/shrink operations, busiest trace hour "
     "(InfusionMaxPerHour counts these)", "count", ("<=", 4), (">", 4)),
    ("infusion_ops_per_hour_mean", "Infusion grow/shrink operations, mean per trace hour",
     "number", None, None),
    ("infusion_gave_back_per_hour_max", "Infusion replicas given back to waiting guaranteed "
     "work, busiest trace hour (outside the limit)", "count", None, None),
    ("guaranteed_peak_share", "P0+P1 peak share of the GPUs (cap)", "ratio", ("<=", 0.80), None),
) + tuple((f"wait_p{p}_{t}", f"Wait p{p} {t}", "seconds", None, None)
         for t in TIERS for p in (50, 99)) + tuple(
    (f"wait_sub_p{p}_P2", f"Wait p{p} P2 from submission (the market's rounds too)", "seconds",
     None, None) for p in (50, 99)) + (
    ("never_started_P2", "P2 jobs never started (e.g. bids never matched)", "count", None, None),
    ("p3_longest_wait", "Longest P3 wait", "seconds", None, None),
    ("lost_gpu_hours", "Lost GPU-hours (preempted segments)", "number", None, None),
    ("lost_gpu_hours_P2", "Lost GPU-hours, P2 (checkpointed: lost runtime)", "number", None, None),
    ("lost_gpu_hours_P3", "Lost GPU-hours, P3", "number", None, None),
    ("revenue", "Revenue (trace time)", "money", None, None),
    ("revenue_P2", "P2 revenue (trace time)", "money", None, None),
)

_OPS = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b,
        "<": lambda a, b: a < b, ">": lambda a, b: a > b}


def _fmt(kind: str, v: Optional[float]) -> str:
    if v is None:
        return "-"
    if kind == "ratio":
        return f"{100 * v:.2f}%"
    if kind == "hours":
        return f"{v:.2f} h"
    if kind == "count":
        return f"{v:g}" if v == int(v) else f"{v:.1f}"
    if kind == "seconds":
        return f"{v / 3600:.2f} h" if v >= 3600 else f"{v:.0f} s"
    return f"{v:,.2f}"


def _fmt_limit(kind: str, lim) -> str:
    if lim is None:
        return ""
    op, v = lim
    return f"{op} {_fmt(kind, v)}"


def verdict(value: Optional[float], target, alert) -> str:
    """'met', 'missed', 'missed, alert' ("below"/"above" strict, as the
    alerts of docs/metrics-and-alerts.md), or '' without a target or a value."""
    if target is None or value is None:
        return ""
    if _OPS[target[0]](value, target[1]):
        return "met"
    if alert is not None and _OPS[alert[0]](value, alert[1]):
        return "missed, alert"
    return "missed"


def compare(runs: Sequence[Dict[str, object]]) -> str:
    """A Markdown table: each KPI per config as mean (min-max over its runs),
    the target, met or missed (judged on the mean)."""
    configs = config_order(str(r["config"]) for r in runs)
    head = "| KPI | target (alert) |"
    rule = "|---|---|"
    for c in configs:
        n = sum(1 for r in runs if r["config"] == c)
        head += f" {c} ({n} run{'s' if n != 1 else ''}) | |"
        rule += "---|---|"
    lines = [head, rule]
    for key, label, kind, target, alert in KPIS:
        lim = _fmt_limit(kind, target)
        if alert:
            lim += f" ({_fmt_limit(kind, alert)})"
        row = f"| {label} | {lim} |"
        for c in configs:
            vals = [r[key] for r in runs if r["config"] == c and r.get(key) is not None]
            if not vals:
                row += " - | |"
                continue
            mean = sum(vals) / len(vals)
            cell = _fmt(kind, mean)
            if len(vals) > 1:
                cell += f" ({_fmt(kind, min(vals))} – {_fmt(kind, max(vals))})"
            row += f" {cell} | {verdict(mean, target, alert)} |"
        lines.append(row)
    return "\n".join(lines) + "\n"


# --- plots -----------------------------------------------------------------

TIER_COLOURS = {"P0": "#1f4e79", "P1": "#2e75b6", "P2": "#ed7d31", "P3": "#a5a5a5"}


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_gpus_in_use(runs: Sequence[Run], path: str) -> None:
    """GPUs in use per tier over trace hours, stacked, the first run of each config."""
    plt = _pyplot()
    firsts = [min((r for r in runs if r.config == c), key=lambda r: r.run)
              for c in config_order(r.config for r in runs)]
    fig, axes = plt.subplots(len(firsts), 1, figsize=(10, 3.2 * len(firsts)), squeeze=False,
                             sharex=True)
    for ax, run in zip(axes[:, 0], firsts):
        times, values = timeline(run)
        x = [run.trace(t - run.t0) / HOUR for t in times]
        ax.stackplot(x, *[values[t] for t in TIERS], labels=TIERS, step="post",
                     colors=[TIER_COLOURS[t] for t in TIERS])
        ax.axhline(run.gpus_total, color="black", linewidth=0.8)
        ax.axhline(run.gpus_total * run.cap_percent / 100, color="red", linewidth=0.8,
                   linestyle="--", label=f"P0+P1 cap {run.cap_percent:g}%")
        ax.set_ylabel("GPUs in use")
        ax.set_title(f"{run.config}, run {run.run} (k={run.k:g})")
        ax.set_ylim(0, run.gpus_total * 1.25)  # room for the legend above the pool line
        ax.legend(loc="upper right", fontsize=8, ncol=5)
    axes[-1, 0].set_xlabel("trace time (h)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_wait_cdf(kpis: Sequence[Dict[str, object]], path: str) -> None:
    """Wait-time CDF per tier, each config's runs pooled; trace seconds, log x."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    configs = config_order(str(r["config"]) for r in kpis)
    for ax, tier in zip(axes.flat, TIERS):
        for c in configs:
            waits = sorted(max(1.0, w) for r in kpis if r["config"] == c
                           for w in r[f"waits_{tier}"])
            if waits:
                ys = [0.0] + [(i + 1) / len(waits) for i in range(len(waits))]
                ax.step([waits[0]] + waits, ys, where="post", label=f"{c} ({len(waits)} jobs)")
        ax.set_xscale("log")
        # Below a few scheduler passes the wait is wall latency times k:
        # time compression makes steps there, not the policy.
        k_max = max([float(r.get("k", 1)) for r in kpis] + [1.0])
        ax.axvspan(1.0, 2.0 * k_max, color="grey", alpha=0.12, linewidth=0)
        ax.annotate(f"< 2 s wall (k={k_max:g}):\nscheduler passes, steps", xy=(1.2, 0.9),
                    fontsize=7, color="dimgrey")
        ax.set_title(f"{tier}: wait (first start - eligible)")
        ax.set_xlabel("trace seconds (waits under 1 s drawn at 1 s)")
        ax.set_ylabel("share of started jobs")
        ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_preemptions(kpis: Sequence[Dict[str, object]], path: str) -> None:
    """Histogram of preemptions per job (P2 and P3 jobs that ran), share of
    jobs, each config's runs pooled."""
    plt = _pyplot()
    configs = config_order(str(r["config"]) for r in kpis)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for ax, tier in zip(axes, ("P2", "P3")):
        counts = {c: [n for r in kpis if r["config"] == c for n in r["preemptions_per_job"][tier]]
                  for c in configs}
        top = max([max(v) for v in counts.values() if v] + [1])
        width = 0.8 / max(1, len(configs))
        for i, c in enumerate(configs):
            v = counts[c]
            if not v:
                continue
            shares = [sum(1 for n in v if n == x) / len(v) for x in range(top + 1)]
            ax.bar([x + i * width for x in range(top + 1)], shares, width=width,
                   label=f"{c} ({len(v)} jobs)")
        ax.set_xticks([x + width * (len(configs) - 1) / 2 for x in range(top + 1)])
        ax.set_xticklabels([str(x) for x in range(top + 1)])
        ax.set_title(f"{tier} jobs: preemptions per job")
        ax.set_xlabel("preemptions in the replay")
        ax.set_ylabel("share of jobs that ran (log)")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --- the report --------------------------------------------------------------


def _run_section(run: Run, k: Dict[str, object], problems: List[str]) -> str:
    lines = [f"### {run.config}, run {run.run} ({run.dir})", ""]
    span_h = run.trace(run.end - run.t0) / HOUR
    lines.append(f"k={run.k:g}, {span_h:.2f} h of trace time ({(run.end - run.t0) / 60:.1f} min "
                 f"wall), {run.gpus_total:g} GPUs, {k['jobs']} jobs, {k['segments']} run segments"
                 + (f", after a warm-up of {run.warmup_hours:g} h (left out)."
                    if run.warmup_hours else "."))
    lag = submission_lag(run)
    if lag:
        lines.append("")
        lines.append(f"Submissions late against the workload's clock (Slurm's submit time): "
                     f"p50 {lag['p50']:.1f} s, p99 {lag['p99']:.1f} s, max {lag['max']:.1f} s wall"
                     f" (p99 = {lag['p99_trace_minutes']:.0f} trace min)"
                     + ("." if lag["p99_trace_minutes"] <= MAX_LAG_TRACE_MINUTES else
                        ": **the submitter fell behind**; waits and rates are not the "
                        "workload's."))
    refused = run.meta.get("refused") or {}
    if refused:
        why: Dict[str, int] = {}
        for msg in refused.values():
            why[msg] = why.get(msg, 0) + 1
        lines.append("")
        lines.append(f"Submissions refused by Slurm: {len(refused)} (" + "; ".join(
            f"{n} x {msg!r}" for msg, n in sorted(why.items(), key=lambda x: -x[1])) + ").")
    if run.end > run.meta.get("window_end", run.end) + 60:
        lines.append("")
        lines.append(f"The window ran {(run.end - run.meta['window_end']) / 60:.1f} min (wall) "
                     "past its planned end: submissions fell behind the workload's times.")
    lines.append("")
    lines.append("| tier | utilisation | lost GPU-h | revenue | wait p50 | wait p99 |")
    lines.append("|---|---|---|---|---|---|")
    for t in TIERS:
        lines.append(f"| {t} | {_fmt('ratio', k['utilisation_by_tier'][t])} | "
                     f"{k['lost_gpu_hours_by_tier'][t]:.2f} | "
                     f"{k['revenue_by_tier'][t]:,.2f} {run.currency} | "
                     f"{_fmt('seconds', k[f'wait_p50_{t}'])} | {_fmt('seconds', k[f'wait_p99_{t}'])} |")
    lines.append("")
    lines.append(f"P2 run segments: {k['p2_segments']} ({k['p2_segments_preempted']} preempted); "
                 "mean per trace day: " + (", ".join(
                     f"day {d}: {v:.2f} h" for d, v in k["p2_mean_run_h_by_day"].items()) or "-"))
    lines.append("")
    lines.append("P3 preemption rate by trace hour, by submitted tier (section 9's): " + " ".join(
        "-" if r is None else f"{100 * r:.0f}%" for r in k["p3_rate_submitted_by_hour"]))
    for w in worst_p3_hours(run, k):
        def gpus(g):
            return "?" if g is None else f"{g:g}"
        lines.append("")
        lines.append(f"Trace hour {w['hour'] + (run.warmup_hours or 0):g}: {w['preempted']} of "
                     f"{w['ran']} P3 runs preempted "
                     f"({100 * w['rate']:.1f}%); " + "; ".join(
                         f"job {b['job_id']} ({b['tier']}, {gpus(b['gpus'])} "
                         f"GPU{'' if b['gpus'] == 1 else 's'}) took "
                         + ", ".join(f"{v} ({gpus(g)})" for v, g in b["victims"])
                         + ("" if b.get("fewest_p3") is None else
                            f" (the nodes it could clear held {b['fewest_p3']} P3 "
                            f"run{'' if b['fewest_p3'] == 1 else 's'} at the fewest)")
                         for b in w["by"]) + ".")
    takes = whole_node_p3_takes(run)
    if takes and takes["preemptors"]:
        lines.append("")
        lines.append(f"Guaranteed jobs that need whole nodes took {takes['taken']} P3 "
                     f"run{'' if takes['taken'] == 1 else 's'} ({takes['preemptors']} "
                     f"preemptor{'' if takes['preemptors'] == 1 else 's'}); the nodes each could "
                     f"have cleared held {takes['fewest']} at the fewest, when it first preempted.")
    again = repeated_p3_takes(run)
    if again and again["waits"]:
        lines.append("")
        n = len(again["repeats"])
        lines.append(
            f"Of {again['waits']} waits in which a preemptor took P3 runs, {n} took them in "
            f"more than one round ({again['earlier']} P3 run{'' if again['earlier'] == 1 else 's'} "
            "in the rounds before the last, whose GPUs the preemptor did not start on)"
            + ("" if not n else ": " + "; ".join(
                f"job {r['job_id']} ({r['tier']}) "
                + ", ".join(f"{c} at {t:g} s" for t, c in r["rounds"])
                for r in again["repeats"])) + ".")
    spread = guaranteed_spread(run)
    if spread and spread["submissions"]:
        lines.append("")
        lines.append(f"At the {spread['submissions']} submissions of guaranteed jobs that need "
                     f"whole nodes, {spread['holding_mean']:.1f} nodes held guaranteed work on "
                     f"average, where {spread['packed_mean']:.1f} would have held it packed.")
    lines.append("")
    lines.append("The same by the tier a run ran as (the exporter's reading): " + " ".join(
        "-" if r is None else f"{100 * r:.0f}%" for r in k["p3_rate_by_hour"]))
    if k["infusion_ops_total"] is not None:
        lines.append("")
        lines.append(f"Capacity infusion: {k['infusion_ops_total']} operations "
                     f"(limit {k['infusion_limit']} an hour); replicas used "
                     f"{_fmt('ratio', k['utilisation_replicas'])} of the GPUs; grow/shrink "
                     "operations by trace hour: " + " ".join(str(n) for n in k["infusion_ops_per_hour"]))
    lines.append("")
    for t in ("P0", "P1"):
        lines.append(f"{t}: {k[f'{t.lower()}_sla_counted']} starts counted for the SLA, "
                     f"start latency p50 / p99 / max "
                     f"{_fmt('count', k[f'{t.lower()}_start_p50_wall'])} / "
                     f"{_fmt('count', k[f'{t.lower()}_start_p99_wall'])} / "
                     f"{_fmt('count', k[f'{t.lower()}_start_max_wall'])} s wall, "
                     f"{k[f'{t.lower()}_never_started']} never started.")
    if k["p3_longest_wait_never_started"]:
        lines.append("The longest P3 wait is a job that never started (counted to the end).")
    lines.append("")
    if problems:
        lines.append(f"**Consistency: {len(problems)} problem(s)**")
        lines.append("")
        lines.extend(f"- {p}" for p in problems[:50])
        if len(problems) > 50:
            lines.append(f"- ... and {len(problems) - 50} more")
    else:
        lines.append("Consistency: bills match slurmdbd run for run; every tier's GPU-seconds "
                     "add up; every job of the workload is there.")
    lost = slurmdbd_lost_runs(run)
    if lost:
        lines.append("")
        lines.append(f"slurmdbd has no record of {len(lost)} run(s) that slurmctld's log shows "
                     f"started and preempted within {LOST_RUN_SECONDS} s (billed at zero): "
                     + ", ".join(f"job {j} at {t}" for j, t in sorted(lost)[:10]) + ".")
    lines.append("")
    return "\n".join(lines)


def write_report(run_dirs: Sequence[str], out_dir: str,
                 warmup: Optional[float] = None) -> Tuple[str, Dict[str, List[str]]]:
    """Writes out_dir/report.md and the PNGs; returns the Markdown and the
    consistency problems per run directory.  Each run is seen from the end
    of its warm-up (run.json's warmup_hours, or `warmup` trace hours)."""
    os.makedirs(out_dir, exist_ok=True)
    runs = [Run(d) for d in run_dirs]
    runs = [measured(r, r.warmup_hours if warmup is None else warmup) for r in runs]
    order = config_order(r.config for r in runs)
    runs.sort(key=lambda r: (order.index(r.config), r.run))
    kpis = [compute_kpis(r) for r in runs]
    problems = {r.dir: check_consistency(r.dir) for r in runs}
    plot_gpus_in_use(runs, os.path.join(out_dir, "gpus_in_use.png"))
    plot_wait_cdf(kpis, os.path.join(out_dir, "wait_cdf.png"))
    plot_preemptions(kpis, os.path.join(out_dir, "preemptions_per_job.png"))

    md = ["# planc-replay: stock Slurm and Plan C on one workload", ""]
    ks = sorted({r.k for r in runs})
    md.append(f"Runs: {len(runs)}; k = {', '.join(f'{k:g}' for k in ks)}. Every figure is in trace "
              "time (wall durations x k), except the SLA's 40 s, which are wall seconds (a "
              "scheduler latency does not scale). Definitions: tools/replay/report.py, the "
              "docs/metrics-and-alerts.md. Revenue is the bills' amounts x k.")
    md.append("")
    md.append(compare(kpis))
    md.append("Met or missed is judged on the mean of a config's runs; \"alert\" means the mean "
              "is past the alert threshold (docs/metrics-and-alerts.md) too.")
    md.append("")
    md.append("![GPUs in use per tier](gpus_in_use.png)")
    md.append("")
    md.append("![Wait-time CDF per tier](wait_cdf.png)")
    md.append("")
    md.append("![Preemptions per job](preemptions_per_job.png)")
    md.append("")
    md.append("## Runs")
    md.append("")
    for r, k in zip(runs, kpis):
        md.append(_run_section(r, k, problems[r.dir]))
    text = "\n".join(md)
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(text)
    return text, problems


def main(argv: Optional[List[str]] = None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python3 -m tools.replay.report",
                                description="planc-replay's report from run directories.")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", required=True, help="directory for report.md and the PNGs")
    args = p.parse_args(argv)
    try:
        _, problems = write_report(args.run_dirs, args.out)
    except Problem as e:
        print(f"planc-replay report: {e}", file=sys.stderr)
        return 2
    bad = 0
    for d, ps in problems.items():
        for line in ps:
            print(f"{d}: {line}", file=sys.stderr)
        bad += bool(ps)
    print(f"{os.path.join(args.out, 'report.md')} written; "
          f"{bad} of {len(problems)} run(s) with consistency problems", file=sys.stderr)
    return 3 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
