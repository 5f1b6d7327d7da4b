"""Workloads for planc-replay: read traces, generate synthetic ones, compress.

Everything here is pure Python (standard library only) and needs no cluster.
A workload is a list of `Job`s in *trace time* (seconds from the trace's
start); `compress(jobs, k)` turns it into the replay's wall time.

Choices made here (each one is a parameter where it matters):

Tiers from a trace.  The Alibaba trace has QoS classes; the mapping
Guaranteed->P0, LS->P1, Burstable->P2, BE->P3 (`DEFAULT_ALIBABA_TIERS`) is
a reading of the trace, not a fact of it, and `tier_map` changes it.
Helios and Philly have no classes: tiers are drawn per job with a seeded
RNG from `tier_mix`.  P2 jobs are elastic training that checkpoints on
SIGTERM (`checkpoints=True`); no other tier checkpoints.

Synthetic workload (`synthetic`):
- Job length: lognormal fitted to a published median and mean
  (median = e^mu, mean = e^(mu + sigma^2/2)): Helios (SC'21, Hu et al.)
  median 206 s, mean 6,652 s (sigma 2.64); Philly (ATC'19, Jeon et al.)
  median 874 s, mean 18,006 s (sigma 2.46).  P1 (guaranteed API) and
  P2/P3 draw from it.  P0 leases are long: lognormal median 4 h, mean 8 h
  (an assumption: no public trace has leases).  Every length is capped at
  `max_length` (default: the span), so a 1 h workload does not carry a
  3-day job; `describe()` gives the realised median and mean.
- GPUs per job: 1 (70%), 2 (10%), 4 (10%), 8 (7%), 16 (3%), never more
  than the pool.  An assumption shaped by the published studies (Helios
  SC'21, Philly ATC'19: single-GPU jobs dominate the count, 8+ GPU jobs
  are a few percent of jobs and a large share of GPU time), not fitted
  numbers.  `fractional_share` (default 0) makes that share of the 1-GPU
  jobs fractional (0.25, 0.5 or 0.75 of a card): the Alibaba trace here
  has 3,078 fractional of 7,064 GPU tasks.
- CPUs and memory: 4 CPUs and 16 GiB per GPU (the private cluster's nodes
  have 32 CPUs and 8 GPUs), at least 1 CPU and 4 GiB.
- Arrivals: a non-homogeneous Poisson process with a daily cycle,
  rate(t) = c * (1 + 0.5 cos(2 pi (t - 14:00) / 24 h)), trace time 0 being
  midnight: three times as many submissions at 14:00 as at 02:00 (the
  studies show day-time peaks; the amplitude is an assumption).  c is set
  so that the *expected offered load* (GPU-seconds offered / GPU-seconds
  the pool has over the span) is `load`; or, with `n_jobs`, exactly that
  many jobs arrive with the same daily shape and the load is what it is.
- Tiers by `tier_mix`, a share of jobs per tier (default P0 5%, P1 15%,
  P2 30%, P3 50%: most jobs are cheap spot batch; guaranteed jobs are
  fewer, and P0's are long).
- Random numbers come only from `random.Random(seed).random()`, whose
  sequence Python guarantees across versions; the distributions are
  computed here from it, so a seed gives the same workload everywhere.

Time compression (`compress`, `clocks`): a factor k divides every submit
time and length, and the policy's clocks are divided by k.  What does not
scale, and so is distorted by k in trace time:
- Slurm's timestamps are whole seconds: every start and end is rounded to
  1 s of wall time, i.e. up to k seconds of trace time.  A job of 206 s at
  k=60 runs 3.4 s.
- Scheduler passes: bf_interval=5 s and sched_interval=10 s (the suite's
  settings) are wall time; a start that waits for backfill waits up to
  5k trace seconds.  slurmctld/planc's 5 s sample likewise.
- Start and end overhead (launch, prolog, epilog, KillWait=2 s and slurmd's
  5 s minimum for a kill, the 0.5 s SIGKILL after a P3 preemption) are
  wall time: each costs k times more trace time than in production, so
  short jobs lose more of their share and utilisation reads lower.
- The P2 grace: 30/k seconds, but Slurm counts whole seconds and a grace
  must leave the victim's SIGTERM handler time to run, so `clocks` uses
  max(2, round(30/k)) (rounded half up): 1 s could end within the same second-tick it
  started (0-1 s effective), 2 s always leaves at least one whole second.
  At k > 15 the grace is longer in trace time than the policy's 30 s.
- The 40 s P0/P1 SLA ("resource allocated in 40 s") is a scheduler
  latency: passes, the victim's kill, the launch.  None of that scales,
  so SlaStartSeconds stays 40 and the report judges the SLA on *wall*
  seconds.  The one part that does scale is the P2 grace inside those
  40 s, which makes a preemption of P2 faster in wall time than in
  production; the report also prints the guaranteed starts' wall latency
  so that can be read off.
- StarvationInterval (60 s), PreemptWindow (24 h), StarvationThreshold
  (30 min) and SpotCapDayLength (24 h) scale; planc.conf takes whole
  seconds, SpotCapDayLength at least 10 s (so k <= 8640).
"""

import csv
import dataclasses
import io
import math
import random
import sys
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

TIERS = ("P0", "P1", "P2", "P3")

# Alibaba GPU 2023 QoS classes onto Plan C tiers: a reading, not a fact.
DEFAULT_ALIBABA_TIERS = {"Guaranteed": "P0", "LS": "P1", "Burstable": "P2", "BE": "P3"}

# Share of jobs per tier, for traces without classes and for synthetic().
DEFAULT_TIER_MIX = {"P0": 0.05, "P1": 0.15, "P2": 0.30, "P3": 0.50}

# Plan C's canonical QoS names (etc/planc.conf.example) onto tiers, for
# export_sacct_to_helios.
DEFAULT_QOS_TIERS = {"p0-lease": "P0", "p1-guaranteed": "P1", "p2-spot": "P2", "p3-spot": "P3"}

# (median, mean) of job length in seconds, from the published studies.
LENGTH_STATS = {"helios": (206.0, 6652.0), "philly": (874.0, 18006.0)}
# P0 leases: (median, mean), an assumption (no public lease trace).
LEASE_STATS = (4 * 3600.0, 8 * 3600.0)

# GPUs per job and its probability (see the module comment).
DEFAULT_GPU_MIX = ((1, 0.70), (2, 0.10), (4, 0.10), (8, 0.07), (16, 0.03))
FRACTIONS = (0.25, 0.5, 0.75)
CPUS_PER_GPU = 4
MEM_MIB_PER_GPU = 16384

DAY = 86400.0
CYCLE_AMPLITUDE = 0.5
CYCLE_PEAK = 14 * 3600.0

# Our neutral workload CSV: one row per job, this header, in this order.
#   name         the job's name in the replay (w000001, ...), unique
#   submit       trace seconds from the trace's start (float)
#   duration     trace seconds of run the job needs (float, > 0)
#   gpus         GPU cards: 0, a fraction below 1, or a whole number
#   cpus         CPUs (int >= 1)
#   mem_mib      memory in MiB (int; 0 = not known, submit without --mem)
#   tier         P0, P1, P2 or P3
#   checkpoints  1 if the job checkpoints on SIGTERM and resumes where it
#                was when requeued (P2 elastic training), else 0
CSV_COLUMNS = ("name", "submit", "duration", "gpus", "cpus", "mem_mib", "tier", "checkpoints")


@dataclasses.dataclass(frozen=True)
class Job:
    name: str
    submit: float
    duration: float
    gpus: float
    cpus: int
    mem_mib: int
    tier: str
    checkpoints: bool


class Dropped:
    """What a reader left out, and why: reason -> count (printed by the CLI)."""

    def __init__(self):
        self.counts: Dict[str, int] = {}

    def add(self, reason: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1

    def total(self) -> int:
        return sum(self.counts.values())

    def __str__(self) -> str:
        if not self.counts:
            return "nothing dropped"
        return "; ".join(f"{n} {why}" for why, n in sorted(self.counts.items()))


def _name(i: int) -> str:
    return f"w{i:06d}"


def _renumber(rows: List[Tuple[float, float, float, int, int, str]]) -> List[Job]:
    """Sorts (submit, duration, gpus, cpus, mem, tier) by submit, shifts the
    first submit to 0 and names the jobs in that order."""
    rows = sorted(rows, key=lambda r: r[0])
    t0 = rows[0][0] if rows else 0.0
    return [
        Job(_name(i + 1), s - t0, d, g, c, m, t, t == "P2")
        for i, (s, d, g, c, m, t) in enumerate(rows)
    ]


# --- random numbers, from random() alone (stable across Python versions) ---


class _Rng:
    def __init__(self, seed: int):
        self._r = random.Random(seed)

    def uniform(self) -> float:
        return self._r.random()

    def exponential(self, rate: float) -> float:
        return -math.log(1.0 - self._r.random()) / rate

    def normal(self) -> float:
        # Box-Muller; 1 - u keeps the log's argument in (0, 1].
        u1, u2 = 1.0 - self._r.random(), self._r.random()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)

    def choice(self, weighted: Sequence[Tuple[object, float]]):
        total = sum(w for _, w in weighted)
        x = self._r.random() * total
        for value, w in weighted:
            x -= w
            if x < 0:
                return value
        return weighted[-1][0]


def lognormal_params(median: float, mean: float) -> Tuple[float, float]:
    """(mu, sigma) of the lognormal with this median and mean (mean > median)."""
    if not 0 < median < mean:
        raise ValueError(f"lognormal needs 0 < median < mean, got {median}, {mean}")
    return math.log(median), math.sqrt(2.0 * math.log(mean / median))


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def capped_lognormal_mean(mu: float, sigma: float, cap: float) -> float:
    """E[min(X, cap)] for X lognormal(mu, sigma)."""
    lc = math.log(cap)
    return (math.exp(mu + sigma * sigma / 2) * _phi((lc - mu - sigma * sigma) / sigma)
            + cap * (1.0 - _phi((lc - mu) / sigma)))


def _cycle(t: float) -> float:
    """Relative arrival rate at trace time t (mean 1 over a whole day)."""
    return 1.0 + CYCLE_AMPLITUDE * math.cos(2.0 * math.pi * (t - CYCLE_PEAK) / DAY)


def _cycle_integral(span: float) -> float:
    """Integral of _cycle over [0, span]."""
    w = 2.0 * math.pi / DAY
    return span + CYCLE_AMPLITUDE / w * (math.sin(w * (span - CYCLE_PEAK)) - math.sin(-w * CYCLE_PEAK))


def _normalise_mix(mix: Dict[str, float]) -> List[Tuple[str, float]]:
    bad = [t for t in mix if t not in TIERS]
    if bad or not mix or any(w < 0 for w in mix.values()) or sum(mix.values()) <= 0:
        raise ValueError(f"tier mix must give P0..P3 non-negative shares, got {mix}")
    return [(t, mix.get(t, 0.0)) for t in TIERS]


def synthetic(n_jobs: Optional[int] = None, seed: int = 1, hours: float = 24.0,
              gpus_total: int = 512, load: Optional[float] = 0.9,
              tier_mix: Dict[str, float] = None, length_stats: str = "helios",
              gpu_mix: Sequence[Tuple[int, float]] = DEFAULT_GPU_MIX,
              fractional_share: float = 0.0, max_length: Optional[float] = None) -> List[Job]:
    """A seeded synthetic workload over `hours` of trace time (see the
    module comment for every distribution).  Give `load` (expected offered
    load, 0.9 = 90% of the pool's GPU-seconds) or `n_jobs` (exactly that
    many jobs; then pass load=None), not both."""
    if (n_jobs is None) == (load is None):
        raise ValueError("give exactly one of n_jobs and load (the other None)")
    if length_stats not in LENGTH_STATS:
        raise ValueError(f"length_stats must be one of {sorted(LENGTH_STATS)}")
    mix = _normalise_mix(tier_mix or DEFAULT_TIER_MIX)
    span = hours * 3600.0
    cap = max_length or span
    gpu_mix = [(g, w) for g, w in gpu_mix if g <= gpus_total]
    trace = lognormal_params(*LENGTH_STATS[length_stats])
    lease = lognormal_params(*LEASE_STATS)
    rng = _Rng(seed)

    if n_jobs is not None:
        # n arrival times drawn from the daily-cycle density by rejection.
        top = 1.0 + CYCLE_AMPLITUDE
        times = []
        while len(times) < n_jobs:
            t = rng.uniform() * span
            if rng.uniform() * top < _cycle(t):
                times.append(t)
        times.sort()
    else:
        # Expected GPU-seconds per job, so that the expected offered load
        # over the span is `load`: count = load * G * span / E[g * d].
        gw = sum(w for _, w in gpu_mix)
        mean_g = sum(g * w for g, w in gpu_mix) / gw
        p1 = dict(gpu_mix).get(1, 0.0) / gw
        mean_g -= p1 * fractional_share * (1.0 - sum(FRACTIONS) / len(FRACTIONS))
        tw = sum(w for _, w in mix)
        mean_d = sum(w * capped_lognormal_mean(*(lease if t == "P0" else trace), cap)
                     for t, w in mix) / tw
        expected = load * gpus_total * span / (mean_g * mean_d)
        c = expected / _cycle_integral(span)
        top = c * (1.0 + CYCLE_AMPLITUDE)
        times, t = [], 0.0
        while True:  # thinning: candidates at the peak rate, kept by rate(t)/peak
            t += rng.exponential(top)
            if t >= span:
                break
            if rng.uniform() * top < c * _cycle(t):
                times.append(t)

    rows = []
    for t in times:
        tier = rng.choice(mix)
        mu, sigma = lease if tier == "P0" else trace
        d = min(math.exp(mu + sigma * rng.normal()), cap)
        g = float(rng.choice(gpu_mix))
        if g == 1 and rng.uniform() < fractional_share:
            g = rng.choice([(f, 1.0) for f in FRACTIONS])
        cpus = max(1, math.ceil(g * CPUS_PER_GPU))
        mem = max(4096, int(g * MEM_MIB_PER_GPU))
        rows.append((round(t, 3), round(max(d, 1.0), 3), g, cpus, mem, tier))
    # Keep absolute submit times (trace time 0 = midnight, for the cycle).
    return [Job(_name(i + 1), s, d, g, c, m, tr, tr == "P2")
            for i, (s, d, g, c, m, tr) in enumerate(rows)]


def describe(jobs: Sequence[Job], gpus_total: int, span: Optional[float] = None) -> Dict[str, object]:
    """Summary of a workload: jobs per tier, lengths, GPUs, offered load.
    Offered load = sum(gpus * duration) / (gpus_total * span), span = the
    given one or the last submit (at least 1 s)."""
    if span is None:
        span = max([j.submit for j in jobs] + [1.0])
    durations = sorted(j.duration for j in jobs)
    n = len(jobs)
    median = 0.0
    if n:
        median = (durations[(n - 1) // 2] + durations[n // 2]) / 2
    gpu_counts: Dict[str, int] = {}
    for j in jobs:
        key = "fractional" if 0 < j.gpus < 1 else f"{j.gpus:g}"
        gpu_counts[key] = gpu_counts.get(key, 0) + 1
    return {
        "jobs": n,
        "per_tier": {t: sum(1 for j in jobs if j.tier == t) for t in TIERS},
        "span_hours": span / 3600.0,
        "duration_median_s": median,
        "duration_mean_s": sum(durations) / n if n else 0.0,
        "gpus": dict(sorted(gpu_counts.items())),
        "gpu_seconds": sum(j.gpus * j.duration for j in jobs),
        "offered_load": sum(j.gpus * j.duration for j in jobs) / (gpus_total * span),
    }


def window(jobs: Sequence[Job], start: float, hours: float) -> List[Job]:
    """The jobs submitted in [start, start + hours) of trace time, shifted so
    that `start` is 0 and renamed in order (to cut a day out of a long trace)."""
    end = start + hours * 3600.0
    kept = [(j.submit - start, j.duration, j.gpus, j.cpus, j.mem_mib, j.tier)
            for j in jobs if start <= j.submit < end]
    kept.sort(key=lambda r: r[0])
    return [Job(_name(i + 1), *r, r[5] == "P2") for i, r in enumerate(kept)]


def scale_arrivals(jobs: Sequence[Job], factor: float) -> List[Job]:
    """Submit times divided by `factor`, lengths kept: raises the offered
    load by `factor`.  A departure from the trace, for a trace whose own
    arrivals offer a pool of this size too little (the Alibaba pod list:
    about 3% of 512 GPUs at its own pace); say so where it is used."""
    if factor <= 0:
        raise ValueError("factor must be positive")
    return [dataclasses.replace(j, submit=j.submit / factor) for j in jobs]


def cap_lengths(jobs: Sequence[Job], max_length: float) -> Tuple[List[Job], int]:
    """Every length capped at `max_length` trace seconds (a pod that lived
    for months would hold its GPUs through the whole replay); returns the
    new list and how many were capped."""
    out = [dataclasses.replace(j, duration=min(j.duration, max_length)) for j in jobs]
    return out, sum(1 for j in jobs if j.duration > max_length)


def fit_to_nodes(jobs: Sequence[Job], cpus: int, mem_mib: int, gpus: int) -> Tuple[List[Job], int]:
    """Clamps each job's CPUs and memory to its GPU share of a node (a job
    of g GPUs gets at most ceil(g * cpus/gpus) CPUs), so that a trace from
    nodes with more CPUs per GPU does not leave this cluster's GPUs idle for
    want of CPUs.  CPU-only jobs are clamped to one node.  Returns the new
    list and how many jobs changed."""
    out, changed = [], 0
    for j in jobs:
        # A multi-node job (more GPUs than a node) gets a node's worth per node.
        share = j.gpus / gpus if j.gpus > 0 else 1.0
        max_c = max(1, math.ceil(share * cpus))
        max_m = max(1, int(share * mem_mib))
        c, m = min(j.cpus, max_c), min(j.mem_mib, max_m) if j.mem_mib else 0
        if (c, m) != (j.cpus, j.mem_mib):
            changed += 1
        out.append(dataclasses.replace(j, cpus=c, mem_mib=m))
    return out, changed


# --- readers ---------------------------------------------------------------


ALIBABA_COLUMNS = ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "qos", "creation_time",
                   "deletion_time", "scheduled_time")


def read_alibaba(pod_csv: str, tier_map: Dict[str, str] = None,
                 dropped: Optional[Dropped] = None) -> List[Job]:
    """Alibaba GPU 2023's openb_pod_list_default.csv (columns name,
    cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase,
    creation_time, deletion_time, scheduled_time; seconds).

    submit = creation_time (shifted so the first kept pod is 0), duration =
    deletion_time - scheduled_time.  Pods never scheduled (empty
    scheduled_time: 897 in the shared file, all Pending) are dropped: they
    never ran, so their length is unknown.  Pods with no time run, a QoS
    the map does not name, or an unreadable row are dropped too; `dropped`
    counts each reason.  Pods still running when the trace was cut
    (deletion_time = the trace's end) are kept with their run so far.
    GPUs: num_gpu, or gpu_milli/1000 for a 1-GPU pod below 1000 (a
    fractional card).  CPUs: cpu_milli/1000 rounded up (at least 1)."""
    tier_map = DEFAULT_ALIBABA_TIERS if tier_map is None else tier_map
    dropped = dropped if dropped is not None else Dropped()
    rows = []
    with open(pod_csv, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ALIBABA_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{pod_csv}: not an Alibaba pod list: missing columns "
                             f"{', '.join(missing)} (openb_pod_list_default.csv has them)")
        for r in reader:
            try:
                if not (r.get("scheduled_time") or "").strip():
                    dropped.add("never scheduled")
                    continue
                run = float(r["deletion_time"]) - float(r["scheduled_time"])
                num_gpu, milli = int(r["num_gpu"]), int(r["gpu_milli"])
                cpus = max(1, math.ceil(int(r["cpu_milli"]) / 1000))
                mem = int(r["memory_mib"])
                submit = float(r["creation_time"])
            except (KeyError, ValueError, TypeError):
                dropped.add("unreadable row")
                continue
            tier = tier_map.get(r.get("qos", ""))
            if tier not in TIERS:
                dropped.add(f"qos {r.get('qos', '')!r} not in the tier map")
                continue
            if run <= 0:
                dropped.add("no time run (deletion <= scheduled)")
                continue
            gpus = milli / 1000.0 if num_gpu == 1 and 0 < milli < 1000 else float(num_gpu)
            rows.append((submit, run, gpus, cpus, mem, tier))
    return _renumber(rows)


def _assign_tiers(n: int, tier_mix: Dict[str, float], seed: int) -> List[str]:
    mix = _normalise_mix(tier_mix or DEFAULT_TIER_MIX)
    rng = _Rng(seed)
    return [rng.choice(mix) for _ in range(n)]


def _parse_time(s) -> Optional[float]:
    """'YYYY-MM-DD HH:MM:SS' (as UTC: only differences matter) or epoch
    seconds; None for empty, 'None', 'Unknown'."""
    if s is None:
        return None
    s = str(s).strip()
    if s in ("", "None", "none", "null", "Unknown", "NULL"):
        return None
    try:
        return float(s)
    except ValueError:
        pass
    import calendar
    return float(calendar.timegm(time.strptime(s, "%Y-%m-%d %H:%M:%S")))


# Helios cluster_log.csv (S-Lab-System-Group/HeliosData README): job_id,
# user, vc, gpu_num, cpu_num, node_num, state, submit_time, start_time,
# end_time, duration, queue; times 'YYYY-MM-DD HH:MM:SS', duration = end -
# start, queue = start - submit (seconds).  There is no job name column
# (a `jobname` column, if present, is ignored, never parsed).  Our export
# adds a `tier` column; when present it is used instead of tier_mix.
HELIOS_COLUMNS = ("job_id", "user", "vc", "gpu_num", "cpu_num", "node_num", "state",
                  "submit_time", "start_time", "end_time", "duration", "queue")


def read_helios(path: str, tier_mix: Dict[str, float] = None, seed: int = 1,
                dropped: Optional[Dropped] = None, gpu_only: bool = False) -> List[Job]:
    """A Helios cluster_log.csv (or our sacct export of the same shape).
    duration = the `duration` column (end - start); jobs that never started
    (no start time) or ran 0 s are dropped and counted.  Memory is not in
    the trace (mem_mib 0).  `gpu_only` drops CPU-only jobs (half of
    Helios's jobs are)."""
    dropped = dropped if dropped is not None else Dropped()
    rows = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ("gpu_num", "cpu_num", "submit_time", "start_time", "end_time")
                   if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: not a Helios cluster_log: missing columns {missing}")
        for r in reader:
            try:
                submit = _parse_time(r["submit_time"])
                start = _parse_time(r["start_time"])
                end = _parse_time(r["end_time"])
                gpus = float(r["gpu_num"] or 0)
                cpus = max(1, math.ceil(float(r["cpu_num"] or 1)))
                run = float(r["duration"]) if (r.get("duration") or "").strip() else None
            except (KeyError, ValueError, TypeError):
                dropped.add("unreadable row")
                continue
            if submit is None or start is None:
                dropped.add("never started")
                continue
            if run is None:
                run = (end - start) if end is not None else 0.0
            if run <= 0:
                dropped.add("ran 0 s")
                continue
            if gpu_only and gpus == 0:
                dropped.add("CPU-only (gpu_only)")
                continue
            tier = (r.get("tier") or "").strip()
            if tier and tier not in TIERS:
                dropped.add(f"tier {tier!r} unknown")
                continue
            rows.append((submit, run, gpus, cpus, 0, tier))
    drawn = _assign_tiers(len(rows), tier_mix, seed)
    rows = [r[:5] + (r[5] or drawn[i],) for i, r in enumerate(rows)]
    return _renumber(rows)


def read_philly(path: str, tier_mix: Dict[str, float] = None, seed: int = 1,
                dropped: Optional[Dropped] = None) -> List[Job]:
    """Philly's cluster_job_log (msr-fiddle/philly-traces README): a JSON
    list of jobs {status, vc, jobid, attempts: [{start_time, end_time,
    detail: [{ip, gpus: [...]}]}], submitted_time, user}; times
    'YYYY-MM-DD HH:MM:SS', a missing time is null or "None".

    GPUs = the GPUs of the first attempt (summed over its machines, as the
    trace's own notebook does).  duration = the sum of the attempts' run
    times: each attempt held the GPUs, so that is the work the job offered
    (a retry after a failure ran again).  Jobs without attempts, without a
    start, or whose attempts have no end (still running at the snapshot, or
    a logging gap) are dropped and counted."""
    import json
    dropped = dropped if dropped is not None else Dropped()
    with open(path) as f:
        log = json.load(f)
    rows = []
    for job in log:
        try:
            submit = _parse_time(job.get("submitted_time"))
            attempts = job.get("attempts") or []
            if submit is None or not attempts:
                dropped.add("no attempts (never started)")
                continue
            gpus = float(sum(len(d.get("gpus") or []) for d in attempts[0].get("detail") or []))
            run, ok = 0.0, True
            for a in attempts:
                s, e = _parse_time(a.get("start_time")), _parse_time(a.get("end_time"))
                if s is None or e is None:
                    ok = False
                    break
                run += max(0.0, e - s)
        except (AttributeError, TypeError, ValueError):
            dropped.add("unreadable job")
            continue
        if not ok:
            dropped.add("an attempt without start or end")
            continue
        if run <= 0:
            dropped.add("ran 0 s")
            continue
        rows.append((submit, run, gpus, max(1, math.ceil(gpus * CPUS_PER_GPU)), 0, ""))
    drawn = _assign_tiers(len(rows), tier_mix, seed)
    rows = [r[:5] + (drawn[i],) for i, r in enumerate(rows)]
    return _renumber(rows)


# --- sacct export ----------------------------------------------------------

# The exact sacct command export_sacct_to_helios reads.  No job name, no
# comment, no user-chosen text: a job name may hold '|' or a newline and
# forge fields; the fields below are numbers, times, states and QoS names
# an admin created.
SACCT_FIELDS = ("JobIDRaw", "QOS", "AllocTRES", "Submit", "Start", "End", "State", "NNodes", "AllocCPUS")
SACCT_COMMAND = ("SLURM_TIME_FORMAT=%s sacct -a -X -n -P --noconvert "
                 "-o " + ",".join(SACCT_FIELDS) + " -S <start> -E <end>")


def _alloc_gpus(tres: str) -> float:
    """GPUs in an AllocTRES string: gres/gpu=N, else the sum of the typed
    gres/gpu:TYPE=N entries (sacct lists both when the GPUs have a type)."""
    plain, typed = None, 0.0
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if key == "gres/gpu":
            plain = float(value)
        elif key.startswith("gres/gpu:"):
            typed += float(value)
    return plain if plain is not None else typed


def _epoch(s: str) -> Optional[float]:
    s = s.strip()
    if s in ("", "Unknown", "None", "0"):
        return None
    return float(s)


def export_sacct_to_helios(sacct_text: str, qos_map: Dict[str, str] = None,
                           dropped: Optional[Dropped] = None) -> str:
    """Turns `SACCT_COMMAND`'s output (SLURM_TIME_FORMAT=%s, so epoch
    seconds) into a Helios-like cluster_log CSV with a `tier` column
    (QoS through `qos_map`; default Plan C's canonical names).  user and vc
    are left empty (not exported); times are written UTC.  Dropped and
    counted: lines without exactly 9 fields, QoS not in the map, runs that
    never started or have not ended.  A job listed more than once (sacct -D)
    keeps its last run.  Returns the CSV text."""
    qos_map = DEFAULT_QOS_TIERS if qos_map is None else qos_map
    dropped = dropped if dropped is not None else Dropped()
    last: Dict[str, List[str]] = {}
    for line in sacct_text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != len(SACCT_FIELDS):
            dropped.add(f"line without exactly {len(SACCT_FIELDS)} fields")
            continue
        last[fields[0]] = fields
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(HELIOS_COLUMNS + ("tier",))
    for job_id, (_, qos, tres, submit, start, end, state, nnodes, cpus) in last.items():
        tier = qos_map.get(qos)
        if tier not in TIERS:
            dropped.add(f"qos {qos!r} not in the map")
            continue
        try:
            t_sub, t_start, t_end = _epoch(submit), _epoch(start), _epoch(end)
            gpus, n_cpus, n_nodes = _alloc_gpus(tres), int(cpus), int(nnodes)
        except ValueError:
            dropped.add("unreadable number or time")
            continue
        if t_start is None:
            dropped.add("never started")
            continue
        if t_end is None:
            dropped.add("not ended")
            continue

        def fmt(t: float) -> str:
            return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))

        w.writerow([job_id, "", "", f"{gpus:g}", n_cpus, n_nodes, state.split(" ")[0],
                    fmt(t_sub if t_sub is not None else t_start), fmt(t_start), fmt(t_end),
                    int(t_end - t_start), int(t_start - (t_sub if t_sub is not None else t_start)),
                    tier])
    return out.getvalue()


# --- our CSV ---------------------------------------------------------------


def write_csv(jobs: Iterable[Job], path: str) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for j in jobs:
            w.writerow([j.name, f"{j.submit:.3f}", f"{j.duration:.3f}", f"{j.gpus:g}", j.cpus,
                        j.mem_mib, j.tier, int(j.checkpoints)])


def read_csv(path: str) -> List[Job]:
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if tuple(header or ()) != CSV_COLUMNS:
            raise ValueError(f"{path}: header must be {','.join(CSV_COLUMNS)}, got {header}")
        jobs, names = [], set()
        for n, row in enumerate(reader, start=2):
            try:
                name, submit, dur, gpus, cpus, mem, tier, ckpt = row
                j = Job(name, float(submit), float(dur), float(gpus), int(cpus), int(mem), tier,
                        ckpt == "1")
            except ValueError as e:
                raise ValueError(f"{path}:{n}: {e}") from None
            if tier not in TIERS or j.duration <= 0 or j.gpus < 0 or name in names \
                    or ckpt not in ("0", "1"):
                raise ValueError(f"{path}:{n}: bad job row {row}")
            names.add(name)
            jobs.append(j)
    return jobs


# --- time compression ------------------------------------------------------


def compress(jobs: Iterable[Job], k: float) -> List[Job]:
    """The workload in wall time: submit and duration divided by k."""
    if k <= 0:
        raise ValueError("k must be positive")
    return [dataclasses.replace(j, submit=j.submit / k, duration=j.duration / k) for j in jobs]


def clocks(k: float) -> Dict[str, int]:
    """The policy's clocks for a replay compressed by k, in whole seconds
    (planc.conf's unit).  Keys are planc.conf's, plus P2GraceTime (the P2
    Tier line's GraceTime, and GraceTime on stock's P2 QoS).  SlaStartSeconds
    is not scaled: see the module comment."""
    if k <= 0:
        raise ValueError("k must be positive")

    def whole(x: float) -> int:  # half up, not Python's round-half-to-even
        return int(math.floor(x + 0.5))

    return {
        "StarvationThreshold": max(1, whole(1800 / k)),
        "StarvationInterval": max(1, whole(60 / k)),
        "PreemptWindow": max(1, whole(86400 / k)),
        "P3PreemptWindow": max(1, whole(3600 / k)),
        "SpotCapDayLength": max(10, whole(86400 / k)),
        "P2GraceTime": max(2, whole(30 / k)),
        "SlaStartSeconds": 40,
    }


# --- command line ------------------------------------------------------------


def _parse_mix(s: Optional[str]) -> Optional[Dict[str, float]]:
    """'P0=0.05,P1=0.15,P2=0.3,P3=0.5' -> dict."""
    if not s:
        return None
    mix = {}
    for part in s.split(","):
        k, _, v = part.partition("=")
        mix[k.strip().upper()] = float(v)
    return mix


def _parse_gpu_mix(s: Optional[str]) -> Sequence[Tuple[int, float]]:
    """'1=0.7,2=0.1,...' -> ((1, 0.7), (2, 0.1), ...); None -> the default."""
    if not s:
        return DEFAULT_GPU_MIX
    return tuple((int(g), float(w)) for g, w in (part.split("=", 1) for part in s.split(",")))


def main(argv: Optional[List[str]] = None) -> int:
    import argparse
    import json
    p = argparse.ArgumentParser(prog="python3 -m tools.replay.workload",
                                description="Make a planc-replay workload CSV.")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("synthetic", help="seeded synthetic workload")
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--hours", type=float, default=24.0)
    s.add_argument("--gpus", type=int, default=512, help="GPUs in the pool")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--load", type=float, help="expected offered load (default 0.9)")
    g.add_argument("--jobs", type=int, help="exactly this many jobs instead of --load")
    s.add_argument("--tier-mix", help="e.g. P0=0.05,P1=0.15,P2=0.3,P3=0.5")
    s.add_argument("--lengths", choices=sorted(LENGTH_STATS), default="helios")
    s.add_argument("--fractional-share", type=float, default=0.0)
    s.add_argument("--max-length", type=float, help="cap on a job's length, trace s (default: the span)")
    s.add_argument("--gpu-mix", help="GPUs=share,... e.g. 1=0.7,2=0.1,4=0.1,8=0.07,16=0.03")
    a = sub.add_parser("alibaba", help="the Alibaba GPU 2023 pod list")
    a.add_argument("pod_csv")
    a.add_argument("--tier-map", help="e.g. Guaranteed=P0,LS=P1,Burstable=P2,BE=P3")
    a.add_argument("--start", type=float, help="keep a window: trace second to start at")
    a.add_argument("--hours", type=float, help="keep a window: its length")
    a.add_argument("--arrival-factor", type=float,
                   help="divide submit times (not lengths) by this, after the window")
    a.add_argument("--max-length", type=float, help="cap every length at this many trace seconds")
    a.add_argument("--fit-node", help="CPUS,MEM_MIB,GPUS of a node: clamp CPUs/memory per GPU")
    a.add_argument("--gpus", type=int, help="pool size, to print the offered load")
    for name in ("helios", "philly"):
        h = sub.add_parser(name, help=f"the {name} trace format")
        h.add_argument("path")
        h.add_argument("--tier-mix")
        h.add_argument("--seed", type=int, default=1)
    x = sub.add_parser("sacct-to-helios", help="sacct output (stdin) to a Helios-like CSV (stdout); "
                       "run: " + SACCT_COMMAND.replace("%", "%%"))
    x.add_argument("--qos-map", help="e.g. p0-lease=P0,p1-guaranteed=P1,p2-spot=P2,p3-spot=P3")
    d = sub.add_parser("describe", help="summarise a workload CSV")
    d.add_argument("path")
    d.add_argument("--gpus", type=int, required=True)
    d.add_argument("--hours", type=float, help="span for the offered load (default: last submit)")
    sub.add_parser("clocks", help="the scaled clocks for k").add_argument("k", type=float)
    for sp in (s, a, sub.choices["helios"], sub.choices["philly"]):
        sp.add_argument("-o", "--output", required=True, help="workload CSV to write")
    args = p.parse_args(argv)

    dropped = Dropped()
    if args.cmd == "clocks":
        print(json.dumps(clocks(args.k), indent=1))
        return 0
    if args.cmd == "describe":
        span = args.hours * 3600 if args.hours else None
        print(json.dumps(describe(read_csv(args.path), args.gpus, span), indent=1))
        return 0
    if args.cmd == "sacct-to-helios":
        qmap = None
        if args.qos_map:
            qmap = dict(part.split("=", 1) for part in args.qos_map.split(","))
        sys.stdout.write(export_sacct_to_helios(sys.stdin.read(), qmap, dropped))
        print(f"sacct-to-helios: {dropped}", file=sys.stderr)
        return 0
    if args.cmd == "synthetic":
        load = None if args.jobs else (args.load if args.load is not None else 0.9)
        jobs = synthetic(n_jobs=args.jobs, seed=args.seed, hours=args.hours, gpus_total=args.gpus,
                         load=load, tier_mix=_parse_mix(args.tier_mix), length_stats=args.lengths,
                         fractional_share=args.fractional_share, max_length=args.max_length,
                         gpu_mix=_parse_gpu_mix(args.gpu_mix))
        span = args.hours * 3600
        gpus = args.gpus
    elif args.cmd == "alibaba":
        tmap = None
        if args.tier_map:
            tmap = {k: v.upper() for k, v in (part.split("=", 1) for part in args.tier_map.split(","))}
        jobs = read_alibaba(args.pod_csv, tmap, dropped)
        span, gpus = None, args.gpus
        if args.start is not None or args.hours is not None:
            jobs = window(jobs, args.start or 0.0, args.hours or 24.0)
            span = (args.hours or 24.0) * 3600
        if args.arrival_factor:
            jobs = scale_arrivals(jobs, args.arrival_factor)
            span = span / args.arrival_factor if span else None
        if args.max_length:
            jobs, capped = cap_lengths(jobs, args.max_length)
            print(f"max-length: {capped} jobs capped at {args.max_length:g} s", file=sys.stderr)
        if args.fit_node:
            c, m, gn = (int(v) for v in args.fit_node.split(","))
            jobs, changed = fit_to_nodes(jobs, c, m, gn)
            print(f"fit-node: {changed} jobs' CPUs or memory clamped to their GPU share", file=sys.stderr)
    elif args.cmd == "helios":
        jobs = read_helios(args.path, _parse_mix(args.tier_mix), args.seed, dropped)
        span, gpus = None, None
    else:
        jobs = read_philly(args.path, _parse_mix(args.tier_mix), args.seed, dropped)
        span, gpus = None, None
    write_csv(jobs, args.output)
    print(f"{args.output}: {len(jobs)} jobs; dropped: {dropped}", file=sys.stderr)
    if gpus:
        print(json.dumps(describe(jobs, gpus, span), indent=1), file=sys.stderr)
    return 0


def cli(argv: Optional[List[str]] = None) -> int:
    """main(), with a trace or workload it cannot read said in one line."""
    try:
        return main(argv)
    except (OSError, ValueError) as e:
        print(f"workload: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli())
