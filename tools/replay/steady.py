"""The steady-state experiment's report: every run of `planc-replay steady`
seen from the end of its warm-up, each KPI as a mean with a 95% confidence
interval over the workload seeds, Plan C against stock seed by seed, and
summary.json for tools.

    python3 -m tools.replay.steady RUNS_DIR [--out DIR] [--warmup H]

RUNS_DIR holds load-<L>/<config>-<seed>/ run directories (what `planc-replay
steady --out RUNS_DIR` writes).  The report goes to DIR (default RUNS_DIR):
report.md, summary.json, and per load the runs' own report (report.py's,
plots included, from the end of the warm-up) in DIR/load-<L>/.

Statistics.  A configuration's runs at one load are one per workload seed;
the interval is Student's t at 95% over them (n - 1 degrees of freedom).
Plan C against stock is paired by seed (the same workload): the ratio or
the difference per seed, and its interval the same way.  A target is met
when the whole interval is on its side, missed when the whole interval is
on the other, and undecided when the interval straddles it (more seeds
decide).

A run is valid when its submissions kept up with the workload's clock: the
99th percentile of their lateness (report.submission_lag: Slurm's submit
time against the workload's) at most report.MAX_LAG_TRACE_MINUTES of trace time,
and the window not overrun; an invalid run is listed and left out of
every figure.
"""

import argparse
import glob
import json
import math
import os
import sys
from typing import Dict, List, Optional, Sequence

from tools.replay import report as R

# Student's t, two-sided 95%, by degrees of freedom.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
       9: 2.262, 10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042}

# The figures the summary carries (report.py's KPI keys).
KEYS = [k for k, *_ in R.KPIS]


def t95(df: int) -> float:
    if df in T95:
        return T95[df]
    below = max(d for d in T95 if d <= df)
    return T95[below]


def interval(values: Sequence[float]) -> Dict[str, object]:
    """Mean and 95% interval (Student's t); one value has no interval."""
    v = [float(x) for x in values if x is not None and not math.isnan(float(x))]
    if not v:
        return {"mean": None, "low": None, "high": None, "runs": 0, "values": []}
    n, mean = len(v), sum(v) / len(v)
    if n == 1:
        return {"mean": mean, "low": None, "high": None, "runs": 1, "values": v}
    sd = math.sqrt(sum((x - mean) ** 2 for x in v) / (n - 1))
    h = t95(n - 1) * sd / math.sqrt(n)
    return {"mean": mean, "low": mean - h, "high": mean + h, "runs": n, "values": v}


def judge(iv: Dict[str, object], op: str, target: float) -> str:
    """'met', 'missed' or 'undecided' on the interval (module comment); one
    run is judged on its value, said so."""
    if iv["mean"] is None:
        return "no value"
    lo = iv["low"] if iv["low"] is not None else iv["mean"]
    hi = iv["high"] if iv["high"] is not None else iv["mean"]
    good = {"<=": lambda x: x <= target, ">=": lambda x: x >= target}[op]
    worst, best = (hi, lo) if op == "<=" else (lo, hi)
    verdict = "met" if good(worst) else "missed" if not good(best) else "undecided"
    return verdict + (" (one run)" if iv["runs"] == 1 else "")


def validity(run: R.Run) -> List[str]:
    why = []
    lag = R.submission_lag(run)
    if lag is None:
        why.append("no workload to measure the submissions' lateness against")
    elif lag["p99_trace_minutes"] > R.MAX_LAG_TRACE_MINUTES:
        why.append(f"submissions late: p99 {lag['p99']:.1f} s wall = "
                   f"{lag['p99_trace_minutes']:.0f} trace min")
    window_end = run.meta.get("window_end")
    if window_end and run.end > window_end + 60:
        why.append(f"window overran by {(run.end - window_end) / 60:.1f} min wall")
    return why


def load_runs(runs_dir: str, warmup: Optional[float]):
    """{load: [(Run measured, kpis, problems)]} and the invalid runs."""
    by_load: Dict[str, List] = {}
    invalid = []
    for path in sorted(glob.glob(os.path.join(runs_dir, "load-*", "*", "run.json"))):
        d = os.path.dirname(path)
        load = os.path.basename(os.path.dirname(d))[len("load-"):]
        run = R.Run(d)
        m = R.measured(run, run.warmup_hours if warmup is None else warmup)
        why = validity(run)
        if why:
            invalid.append({"dir": d, "why": why})
            continue
        k = R.compute_kpis(m)
        k["seed"] = run.run
        k["submit_lag_p99_trace_s"] = R.submission_lag(run)["p99_trace_minutes"] * 60.0
        by_load.setdefault(load, []).append((m, k, R.check_consistency(d)))
    return by_load, invalid


# Plan C (fixed price, no infusion) against stock at the high load: the
# experiment's targets.  (key, label, how, op, target); how: "abs" judges
# Plan C's own interval, "ratio" the seed-paired Plan C / stock interval.
# P2's wait counts from submission: a bid held for the market's rounds is
# not eligible until a round matches it, and those rounds are its wait
# (without the market the two are the same here).
TARGETS = [
    ("p3_rate_submitted_worst", "P3 worst hour by submitted tier", "abs", "<=", 0.10),
    ("wait_sub_p99_P2", "P2 p99 wait from submission, Plan C / stock", "ratio", "<=", 1.5),
    ("lost_gpu_hours", "Lost GPU-hours, Plan C / stock", "ratio", "<=", 1.0),
    ("p0_sla_every", "P0 SLA, every submission", "abs", ">=", 0.999),
    ("p1_sla_every", "P1 SLA, every submission", "abs", ">=", 0.999),
    ("utilisation_of_ceiling", "Utilisation over its ceiling", "abs", ">=", 0.97),
]


def paired(kpis: Sequence[Dict], key: str, config: str, base: str = "stock") -> Dict:
    """Per seed, config's value over base's (the same workload)."""
    a = {k["seed"]: k.get(key) for k in kpis if k["config"] == config}
    b = {k["seed"]: k.get(key) for k in kpis if k["config"] == base}
    ratios = [a[s] / b[s] for s in sorted(a) if s in b and a[s] is not None and b[s]]
    return interval(ratios)


def summarise(by_load) -> Dict[str, object]:
    out: Dict[str, object] = {"loads": {}}
    for load, items in sorted(by_load.items()):
        kpis = [k for _, k, _ in items]
        configs = R.config_order(k["config"] for k in kpis)
        per = {c: {key: interval([k.get(key) for k in kpis if k["config"] == c])
                   for key in KEYS} for c in configs}
        targets = []
        for key, label, how, op, target in TARGETS:
            for c in configs:
                if c == "stock":
                    continue
                iv = paired(kpis, key, c) if how == "ratio" else per[c][key]
                targets.append({"kpi": key, "label": label, "config": c, "how": how,
                                "op": op, "target": target, **iv, "verdict": judge(iv, op, target)})
        out["loads"][load] = {"configs": per, "targets": targets,
                              "runs": [{"config": k["config"], "seed": k["seed"],
                                        "dir": m.dir, "k": m.k, "warmup_hours": m.warmup_hours,
                                        "commit": (m.meta.get("source") or {}).get("commit"),
                                        "modified": (m.meta.get("source") or {}).get("modified"),
                                        "plugins_sha256": (m.meta.get("source") or {}).get(
                                            "plugins_sha256"),
                                        "submit_lag_p99_trace_s": k["submit_lag_p99_trace_s"],
                                        "consistency_problems": len(p)}
                                       for m, k, p in items]}
    return out


def _cell(kind: str, iv: Dict[str, object]) -> str:
    if iv["mean"] is None:
        return "-"
    text = R._fmt(kind, iv["mean"])
    if iv["low"] is not None:
        # Shown inside what the figure can be (a share is 0-100%); the
        # verdict reads the interval itself.
        high = min(iv["high"], 1.0) if kind == "ratio" else iv["high"]
        text += f" [{R._fmt(kind, max(iv['low'], 0.0))}, {R._fmt(kind, high)}]"
    return text


def markdown(summary: Dict[str, object], invalid: List[Dict]) -> str:
    kinds = {key: kind for key, _, kind, *_ in R.KPIS}
    labels = {key: label for key, label, *_ in R.KPIS}
    md = ["# Steady state: stock Slurm and Plan C, every configuration, from one tree", ""]
    for load, s in summary["loads"].items():
        runs = s["runs"]
        commits = sorted({str(r["commit"])[:12] for r in runs})
        builds = sorted({str(r.get("plugins_sha256"))[:12] for r in runs})
        ks = ", ".join(sorted({f"{r['k']:g}" for r in runs}))
        warm = ", ".join(sorted({f"{r['warmup_hours']:g}" for r in runs}))
        md.append(f"## Offered load {load}")
        md.append("")
        md.append(f"{len(runs)} runs; commit {', '.join(commits)}; plugins (sha256 of the "
                  f"loaded .so files) {', '.join(builds)}"
                  + (" (a tree with changes)" if any(r["modified"] for r in runs) else "")
                  + f"; k = {ks}; the first {warm} h of each discarded. Cells: mean [95% "
                  "interval] over the seeds.")
        md.append("")
        md.append("### The targets (Plan C against stock)")
        md.append("")
        if s["targets"]:
            md.append("| target | configuration | runs | interval | verdict |")
            md.append("|---|---|---|---|---|")
        else:
            # summarise() judges every configuration but stock.
            md.append("None judged: the targets compare a Plan C configuration with stock, "
                      "and this load has runs of stock only.")
        for t in s["targets"]:
            kind = "number" if t["how"] == "ratio" else kinds.get(t["kpi"], "number")
            md.append(f"| {t['label']} {t['op']} {R._fmt(kind, t['target'])} | {t['config']} | "
                      f"{t['runs']} | {_cell(kind, t)} | {t['verdict']} |")
        md.append("")
        md.append("### Every KPI")
        md.append("")
        configs = list(s["configs"])
        md.append("| KPI | " + " | ".join(configs) + " |")
        md.append("|---|" + "---|" * len(configs))
        for key in KEYS:
            if all(s["configs"][c][key]["mean"] is None for c in configs):
                continue
            md.append(f"| {labels.get(key, key)} | " + " | ".join(
                _cell(kinds.get(key, "number"), s["configs"][c][key]) for c in configs) + " |")
        md.append("")
        md.append(f"Per run (plots, consistency, per-hour rates): [load-{load}/report.md]"
                  f"(load-{load}/report.md).")
        md.append("")
    if invalid:
        md.append("## Runs left out")
        md.append("")
        md.extend(f"- {x['dir']}: {'; '.join(x['why'])}" for x in invalid)
        md.append("")
    return "\n".join(md)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m tools.replay.steady",
                                description="The steady-state experiment's report.")
    p.add_argument("runs_dir")
    p.add_argument("--out", default=None)
    p.add_argument("--warmup", type=float, default=None,
                   help="trace hours to discard (default: each run's, from run.json)")
    p.add_argument("--no-plots", action="store_true")
    a = p.parse_args(argv)
    out = a.out or a.runs_dir
    by_load, invalid = load_runs(a.runs_dir, a.warmup)
    if not by_load:
        print(f"steady: no valid run under {a.runs_dir}", file=sys.stderr)
        return 2
    summary = summarise(by_load)
    summary["invalid"] = invalid
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(markdown(summary, invalid))
    if not a.no_plots:
        for load, items in by_load.items():
            R.write_report([m.dir for m, _, _ in items], os.path.join(out, f"load-{load}"),
                           warmup=a.warmup)
    bad = sum(1 for items in by_load.values() for _, _, p in items if p)
    print(f"{os.path.join(out, 'report.md')} and summary.json written; "
          f"{sum(len(v) for v in by_load.values())} runs, {len(invalid)} left out, "
          f"{bad} with consistency problems", file=sys.stderr)
    return 3 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
