"""Section 9's KPIs, defined once.

Pure functions over small tables (lists of dicts), all times in *trace*
seconds unless a function says otherwise; the replay report (report.py)
turns a run's wall times into trace time and calls these.
docs/metrics-and-alerts.md, "Alerts (Prometheus)", says how the recording
rules read the same KPIs from the exporter's counters
(planc:p2_run_seconds_per_preemption:24h is the P2 figure below; the
exporter counts runs by the tier they ran as).

The policy's table (section 9) and what each line means here:

P0 SLA attainment (target 99.9%, alert < 99.5%): `sla`.  Every guaranteed
    submission counts: started within SlaStartSeconds of becoming eligible
    is met; started later, never started although eligible that long
    before the window ended, or refused by Slurm (a timeout included) is
    missed.  Only jobs held back by their own limits (held, dependency,
    begin time, a per-user limit) are left out, and counted apart.  The
    SLA's seconds are wall seconds: a scheduler's latency does not scale
    with time compression.

P2 mean run (target >= 4 h, alert < 2 h): `p2_interruption`.  How long a
    P2 instance runs before it is interrupted, so a survival question: a
    segment that completed, was cancelled or was cut by the window's end
    was *not* interrupted (censored).  Two estimates: run-hours per P2
    preemption (the exponential estimate of the mean time to interruption:
    every P2 run-hour over the number of interruptions; no interruption
    gives no value and a lower bound), and the restricted mean from the
    Kaplan-Meier curve up to a horizon (24 h, or the longest run seen if
    shorter: the curve is not known past it).  P2 means submitted in P2:
    a P3 job's free attempt is P3's.  The plain mean of every P2 segment,
    the old reading, is shown beside them, labelled.

P3 preemption rate (target <= 10% an hour, alert > 20%): `p3_rate_by_hour`.
    By submitted tier: a P3 job on its free P2 attempt is still P3.  Per
    hour (a, b]: P3 runs that ended preempted in it, over P3 runs that
    ended in it or still run at b.  An hour without any P3 run has no rate
    (it is shown as empty, with how many P3 jobs waited in it); P3 jobs
    that never started are counted.

Preemptions per P2 instance (<= 3 in 24 h, alert > 5): `preemptions_24h`.

Utilisation (target >= 80%, alert < 60%): `utilisation`, beside
    `greedy_ceiling`.  Allocation over the pool, the workload's jobs and
    infused replicas apart; goodput leaves out preempted runs (their work
    is lost or, for a checkpointing P2 job, its runtime since the last
    checkpoint) and the replicas.  The ceiling is what an ideal greedy
    scheduler reaches with the same workload over the same window on the
    same nodes: every job started in submission order as soon as GPUs on
    nodes that can hold it are free (one that fits may pass one that does
    not), no preemption, no overhead.  The same greedy over one pool of
    GPUs, where a job may straddle nodes, is shown beside it (a looser
    ceiling).  A
    window that starts empty and cuts long jobs cannot reach 100%; the
    ceiling says how much it can.

Start lateness (not a section 9 KPI; it explains the gap to the ceiling):
    `start_lateness`.  How long after a job could start slurmctld started
    it, in wall seconds: from the later of its eligibility and the last
    job end on the nodes it got to its start, by which scheduler started
    it (the main pass or backfill), and the GPU-seconds that kept idle.
    The GPUs may have been free before that last end, so it is a lower
    bound.  Scheduler passes are wall seconds and do not scale with time
    compression: at k = 240 one second of it is four trace minutes of idle
    GPUs, which the ideal greedy ceiling never pays.

Idle-threshold triggers ("stable", alert on frequent change):
    `ops_per_hour`: capacity infusion's operations per hour against the
    alert's threshold (PlancIdleThresholdFlapping: more than 6 crossings
    an hour).
"""

import math
from typing import Dict, Iterable, List, Optional, Sequence

HOUR, DAY = 3600.0, 86400.0


def _mean(values: Sequence[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


# --- P2 run length before interruption --------------------------------------


def kaplan_meier(lengths: Sequence[float], events: Sequence[bool]) -> List[tuple]:
    """The Kaplan-Meier survival curve: [(t, S(t) just after t)] at each
    time an event happened.  At a tie, events come before censoring (a
    segment censored at t was at risk at t)."""
    pairs = sorted(zip(lengths, events), key=lambda p: (p[0], not p[1]))
    at_risk, s, curve, i = len(pairs), 1.0, [], 0
    while i < len(pairs):
        t = pairs[i][0]
        d = n_here = 0
        while i < len(pairs) and pairs[i][0] == t:
            d += 1 if pairs[i][1] else 0
            n_here += 1
            i += 1
        if d:
            s *= 1.0 - d / at_risk
            curve.append((t, s))
        at_risk -= n_here
    return curve


def restricted_mean(curve: Sequence[tuple], horizon: float) -> float:
    """The area under a survival curve (a step function from S(0) = 1)
    from 0 to `horizon`: the mean run length, runs longer than the horizon
    counted as the horizon."""
    area, last_t, last_s = 0.0, 0.0, 1.0
    for t, s in curve:
        if t >= horizon:
            break
        area += last_s * (t - last_t)
        last_t, last_s = t, s
    return area + last_s * (horizon - last_t)


def p2_interruption(segments: Iterable[Dict], horizon: float = DAY) -> Dict[str, object]:
    """segments: {"submitted": tier, "tier": tier it ran as, "length": trace
    s, "preempted": bool}.  The P2 instances' runs (submitted and ran as
    P2)."""
    runs = [s for s in segments if s["submitted"] == "P2" and s["tier"] == "P2"]
    lengths = [max(0.0, float(s["length"])) for s in runs]
    events = [bool(s["preempted"]) for s in runs]
    run_hours = sum(lengths) / HOUR
    n_events = sum(events)
    out: Dict[str, object] = {
        "segments": len(runs),
        "preemptions": n_events,
        "censored": len(runs) - n_events,
        "run_hours": run_hours,
        # No interruption: no estimate, only a lower bound (all run-hours).
        "run_hours_per_preemption": run_hours / n_events if n_events else None,
        "run_hours_lower_bound": run_hours if runs and not n_events else None,
        # The curve is known up to the longest run seen: no further.
        "horizon_h": min(horizon, max(lengths)) / HOUR if runs else None,
        "km_restricted_mean_h": (restricted_mean(kaplan_meier(lengths, events),
                                                 min(horizon, max(lengths))) / HOUR
                                 if runs else None),
        "plain_mean_h": _mean(lengths) / HOUR if runs else None,
    }
    return out


# --- P3 preemption rate by submitted tier -------------------------------------


def rate_by_hour(runs: Sequence[Dict], start: float, end: float,
                 hour: float = HOUR) -> List[Dict[str, object]]:
    """runs: {"start", "end", "preempted"}; the window [start, end] cut in
    hours of `hour` seconds (the last one may be short).  Per hour (a, b]:
    runs that ended preempted in it (as Prometheus's increase() over the
    hour ending at b), over runs that ended in it or still run at b; no
    rate for an hour without a run."""
    n_hours = max(1, math.ceil((end - start) / hour - 1e-9))
    hours: List[Dict[str, object]] = []
    for h in range(n_hours):
        a, b = start + h * hour, min(start + (h + 1) * hour, end)
        ended = [s for s in runs if a < s["end"] <= b]
        running = sum(1 for s in runs if s["start"] <= b < s["end"])
        ran = len(ended) + running
        preempted = sum(1 for s in ended if s["preempted"])
        hours.append({"hour": h, "b": b, "preempted": preempted, "ran": ran,
                      "rate": preempted / ran if ran else None})
    return hours


# The fewest P3 runs an hour needs for its rate to count as the busy
# hours' worst (a display choice, not the policy's: the policy's target is
# every hour's).
MIN_P3_RUNS = 10


def p3_rate_by_hour(jobs: Iterable[Dict], segments: Iterable[Dict], start: float, end: float,
                    hour: float = HOUR) -> Dict[str, object]:
    """jobs: {"job_id", "tier" (submitted), "eligible", "first_start" or
    None}; segments: {"job_id", "start", "end", "preempted"}; hours as
    rate_by_hour's."""
    p3_jobs = {j["job_id"]: j for j in jobs if j["tier"] == "P3"}
    hours = rate_by_hour([s for s in segments if s["job_id"] in p3_jobs], start, end, hour)
    for x in hours:
        b = x.pop("b")
        x["waiting"] = sum(1 for j in p3_jobs.values() if j["eligible"] <= b and (
            j["first_start"] is None or j["first_start"] > b))
    rates = [x["rate"] for x in hours if x["rate"] is not None]
    # Beside the worst hour: the worst of the hours with at least
    # MIN_P3_RUNS runs (one preempted of one is 100%), and the window's
    # preemptions over its runs (each run counted in every hour it touched).
    busy = [x["rate"] for x in hours if x["ran"] >= MIN_P3_RUNS]
    ran = sum(x["ran"] for x in hours)
    return {
        "hours": hours,
        "mean": _mean(rates),
        "worst": max(rates) if rates else None,
        "worst_busy": max(busy) if busy else None,
        "busy_hours": len(busy),
        "pooled": sum(x["preempted"] for x in hours) / ran if ran else None,
        "empty_hours": sum(1 for x in hours if x["rate"] is None),
        "never_started": sum(1 for j in p3_jobs.values() if j["first_start"] is None),
        "jobs": len(p3_jobs),
    }


# --- preemptions per P2 instance in 24 h -------------------------------------


def max_in_window(times: Sequence[float], width: float) -> int:
    """The most of `times` inside any window [t, t + width)."""
    ts, best, lo = sorted(times), 0, 0
    for hi, t in enumerate(ts):
        while ts[lo] <= t - width:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def preemptions_24h(preempted_at: Dict[str, List[float]], job_ids: Iterable[str],
                    window: float = DAY) -> List[int]:
    """Per job (that ran), the most of its preemptions inside any window."""
    return [max_in_window(preempted_at.get(j, []), window) for j in job_ids]


# --- utilisation, goodput and the ceiling -------------------------------------


def _clip(a: float, b: float, start: float, end: float) -> float:
    return max(0.0, min(b, end) - max(a, start))


def utilisation(segments: Iterable[Dict], replicas: Iterable[Dict], gpus_total: float,
                start: float, end: float) -> Dict[str, Optional[float]]:
    """segments and replicas: {"start", "end", "gpus", "preempted"} (a
    replica's "preempted" is ignored).  Shares of the pool's GPU-seconds
    over [start, end]."""
    pool = gpus_total * (end - start)
    work = lost = 0.0
    for s in segments:
        g = s["gpus"] * _clip(s["start"], s["end"], start, end)
        work += g
        if s["preempted"]:
            lost += g
    rep = sum(r["gpus"] * _clip(r["start"], r["end"], start, end) for r in replicas)
    return {
        "allocated": (work + rep) / pool,
        "workload": work / pool,
        "replicas": rep / pool,
        "goodput": (work - lost) / pool,
        "preempted": lost / pool,
    }


def _place(free: List[float], gpus: float, per_node: float) -> Optional[List[tuple]]:
    """Where a job of `gpus` goes on nodes with `free` GPUs each, as the
    replay asks for it (planc-replay's sbatch_args: up to a node's GPUs on
    one node, more on whole-node shares of ceil(gpus / per_node) nodes):
    the fullest nodes that fit (best fit), or None."""
    k = max(1, math.ceil(gpus / per_node - 1e-9))
    each = gpus / k if k == 1 else math.ceil(gpus / k)
    fit = sorted((f, n) for n, f in enumerate(free) if f >= each - 1e-9)
    if len(fit) < k:
        return None
    return [(n, each) for _, n in fit[:k]]


def greedy_ceiling(workload: Iterable[Dict], gpus_total: float, start: float,
                   end: float, gpus_per_node: Optional[float] = None) -> Optional[float]:
    """workload: {"submit", "duration", "gpus"}, trace seconds from the
    window's clock.  The utilisation over [start, end] of the ideal greedy
    schedule (module comment).  With `gpus_per_node`, on the same nodes as
    the cluster (gpus_total / gpus_per_node of them, each job placed as the
    replay asks for it, best fit); without, on one pool of GPUs (a job may
    straddle nodes: a looser ceiling).  A job larger than the pool never
    runs."""
    import heapq
    from collections import deque
    jobs = sorted((float(w["submit"]), float(w["duration"]), float(w["gpus"]))
                  for w in workload if float(w["gpus"]) <= gpus_total)
    pool = gpus_total * (end - start)
    if pool <= 0:
        return None
    nodes = int(round(gpus_total / gpus_per_node)) if gpus_per_node else 1
    per_node = float(gpus_per_node) if gpus_per_node else float(gpus_total)
    free = [per_node] * nodes
    used, i, eps = 0.0, 0, 1e-9
    running: List[tuple] = []  # (end, order, [(node, gpus)])
    # Waiting jobs by size, each in submission order: the earliest
    # submitted job that fits is the next to start, as a scan of one queue
    # in submission order would find it.
    waiting: Dict[float, deque] = {}
    order = 0
    while True:
        nxt = min(jobs[i][0] if i < len(jobs) else math.inf,
                  running[0][0] if running else math.inf)
        if nxt == math.inf or nxt >= end:
            break
        now = nxt
        while running and running[0][0] <= now + eps:
            for n, g in heapq.heappop(running)[2]:
                free[n] += g
        while i < len(jobs) and jobs[i][0] <= now + eps:
            waiting.setdefault(jobs[i][2], deque()).append((order, jobs[i][1]))
            order += 1
            i += 1
        most = max(free)
        while True:
            place = None
            for _, g in sorted((q[0][0], g) for g, q in waiting.items()
                               if q and g <= sum(free) + eps and min(g, per_node) <= most + eps):
                place = _place(free, g, per_node)
                if place:
                    break
            if not place:
                break
            o, duration = waiting[g].popleft()
            for n, share in place:
                free[n] -= share
            most = max(free)
            heapq.heappush(running, (now + duration, o, place))
            used += g * _clip(now, now + duration, start, end)
    return used / pool


# --- the SLA, counting every guaranteed submission -----------------------------


def sla(jobs: Iterable[Dict], tier: str, sla_seconds: float, end: float) -> Dict[str, object]:
    """jobs: {"tier", "eligible", "first_start" or None, "held_reason" ("" if
    none), "refused" (bool: Slurm refused or timed the submission out)},
    wall seconds.  Met over counted (module comment)."""
    met = missed = held = too_late = 0
    for j in jobs:
        if j["tier"] != tier:
            continue
        if j.get("refused"):
            missed += 1
        elif j.get("held_reason"):
            held += 1
        elif j["first_start"] is not None:
            if j["first_start"] - j["eligible"] <= sla_seconds:
                met += 1
            else:
                missed += 1
        elif j["eligible"] + sla_seconds <= end:
            missed += 1
        else:
            too_late += 1  # eligible in the window's last seconds: no verdict
    counted = met + missed
    return {"attainment": met / counted if counted else None, "met": met, "missed": missed,
            "held_back": held, "no_verdict": too_late, "counted": counted}


# --- start lateness --------------------------------------------------------------


def start_lateness(events: Iterable[Dict], start: float, end: float) -> Dict[str, object]:
    """events, wall seconds, in log order: {"kind": "start", "time", "nodes",
    "eligible" (None: unknown, the start is not judged), "gpus", "by"
    ("main" or "backfill")} or {"kind": "free", "time", "nodes"} (a job
    ended or was requeued: its nodes' GPUs were given back).  Starts in
    [start, end] are judged (module comment).  Per scheduler: starts,
    mean and max lateness in seconds; and the GPU-seconds they cost."""
    last_free: Dict[str, float] = {}
    by: Dict[str, List[float]] = {}
    gpu_seconds = 0.0
    for e in events:
        if e["kind"] == "free":
            for n in e["nodes"]:
                last_free[n] = e["time"]
            continue
        if e.get("eligible") is None or not start <= e["time"] <= end:
            continue
        could = max([e["eligible"]] + [last_free.get(n, -math.inf) for n in e["nodes"]])
        late = max(0.0, e["time"] - could)
        by.setdefault(e["by"], []).append(late)
        gpu_seconds += late * e["gpus"]
    return {"by": {k: {"starts": len(v), "mean_s": sum(v) / len(v), "max_s": max(v)}
                   for k, v in sorted(by.items())},
            "gpu_seconds": gpu_seconds}


# --- idle-threshold triggers ----------------------------------------------------


def ops_per_hour(times: Iterable[float], start: float, end: float, hour: float = HOUR,
                 alert_above: int = 6) -> Dict[str, object]:
    """Capacity infusion's operations per hour over [start, end), against
    the flapping alert's threshold (more than `alert_above` an hour)."""
    n_hours = max(1, math.ceil((end - start) / hour - 1e-9))
    per = [0] * n_hours
    for t in times:
        if start <= t < end:
            per[min(n_hours - 1, int((t - start) // hour))] += 1
    return {"per_hour": per, "max": max(per), "mean": sum(per) / n_hours,
            "hours_over_alert": sum(1 for x in per if x > alert_above), "alert_above": alert_above}
