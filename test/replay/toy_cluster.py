"""A toy scheduler that turns a workload into a run directory in the
format report.py reads, for tests only.  Not Slurm and not the policy:
one-second steps, whole-second times like Slurm's, guaranteed tiers
preempting P3 then P2 (shortest run first, no grace), P2 preempting P3,
preempted jobs requeued (a checkpointing job keeps its progress), and at
the end every running job cancelled and every pending one billed "never
ran", as the cluster-driving half does."""
import csv
import json
import math
import os

from tools.replay import report as R
from tools.replay import workload as W

RANK = {"P0": 0, "P1": 0, "P2": 1, "P3": 2}
PREEMPTS = {"P0": ("P3", "P2"), "P1": ("P3", "P2"), "P2": ("P3",), "P3": ()}
FACTOR = {"P0": 1.0, "P1": 1.0, "P2": 0.35, "P3": 0.40}
PRE = "preempted: unfinished preempted time is not billed"


def simulate(jobs, run_dir, k, gpus_total, hours, config="planc", run=1, t0=1_800_000_000,
             cap_percent=80):
    wall = W.compress(jobs, k)
    end = t0 + math.ceil(hours * 3600 / k)
    cap = math.floor(gpus_total * cap_percent / 100)
    state = {j.name: {"job": j, "id": 100 + i, "left": j.duration, "restarts": 0,
                      "eligible": None, "first": None, "end": None, "final": "PENDING"}
             for i, j in enumerate(wall)}
    running, pending, bills = {}, [], []
    arrivals = sorted(wall, key=lambda j: j.submit)
    nxt = 0

    def bill(s, start, stop, st, reason=""):
        j = s["job"]
        secs = stop - start
        micros = 0 if reason else round(j.gpus * secs * 20e6 / 3600 * FACTOR[j.tier])
        if micros == 0 and not reason:
            reason = "zero billable seconds"
        bills.append((s["id"], s["restarts"], j.tier, start, stop, st, j.gpus,
                      j.gpus * secs, micros, reason))

    for t in range(t0, end + 1):
        for name in [n for n, (st, _) in running.items() if state[n]["left"] <= t - st]:
            s = state[name]
            bill(s, running.pop(name)[0], t, "COMPLETED")
            s["end"], s["final"] = t, "COMPLETED"
        while nxt < len(arrivals) and t0 + arrivals[nxt].submit <= t:
            s = state[arrivals[nxt].name]
            s["submit"] = t0 + arrivals[nxt].submit
            s["eligible"] = s["first_eligible"] = math.ceil(s["submit"])
            pending.append(arrivals[nxt].name)
            nxt += 1
        if t == end:
            break
        pending.sort(key=lambda n: (RANK[state[n]["job"].tier], state[n]["eligible"]))
        for name in list(pending):
            j = state[name]["job"]
            used = sum(state[n]["job"].gpus for n in running)
            guaranteed = sum(state[n]["job"].gpus for n in running
                             if state[n]["job"].tier in ("P0", "P1"))
            if j.tier in ("P0", "P1") and guaranteed + j.gpus > cap:
                continue
            if gpus_total - used < j.gpus:
                victims = sorted((n for n in running if state[n]["job"].tier in PREEMPTS[j.tier]),
                                 key=lambda n: (PREEMPTS[j.tier].index(state[n]["job"].tier),
                                                -running[n][0]))
                free, chosen = gpus_total - used, []
                for v in victims:
                    if free >= j.gpus:
                        break
                    chosen.append(v)
                    free += state[v]["job"].gpus
                if free < j.gpus:
                    continue
                for v in chosen:
                    sv = state[v]
                    start = running.pop(v)[0]
                    bill(sv, start, t, "PREEMPTED", PRE)
                    sv["left"] = sv["left"] - (t - start) if sv["job"].checkpoints \
                        else sv["job"].duration
                    sv["restarts"] += 1
                    sv["eligible"] = t
                    pending.append(v)
            pending.remove(name)
            running[name] = (t, j.gpus)
            if state[name]["first"] is None:
                state[name]["first"] = t
            state[name]["final"] = "RUNNING"
    for name, (start, _) in running.items():
        bill(state[name], start, end, "CANCELLED")
        state[name]["end"], state[name]["final"] = end, "CANCELLED"
    for name in pending:
        s = state[name]
        bills.append((s["id"], s["restarts"], s["job"].tier, end, end, "CANCELLED",
                      s["job"].gpus, 0, 0, "never ran"))
        s["end"], s["final"] = end, "CANCELLED"

    meta = {"config": config, "run": run, "k": k, "t0": t0, "end": end,
            "gpus_total": gpus_total, "workload": "workload.csv"}
    rows = [[s["job"].name, s["id"], s["job"].tier, s["job"].gpus, s["submit"],
             s["first_eligible"], "" if s["first"] is None else s["first"],
             "" if s["end"] is None else s["end"], s["final"], s["restarts"]]
            for s in state.values() if "submit" in s]
    sacct = [(b[0], b[3], b[4], b[5]) for b in bills if b[9] != "never ran"]
    return write_run_dir(run_dir, meta, rows, bills, sacct, jobs)


def write_run_dir(run_dir, meta, job_rows, bill_rows, sacct_rows, workload):
    """Writes a run directory: run.json, jobs.csv, segments.csv,
    sacct_segments.csv (rows in report.py's column order) and the
    workload as workload.csv."""
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "run.json"), "w") as f:
        json.dump(meta, f)
    for name, columns, rows in (("jobs.csv", R.JOB_COLUMNS, job_rows),
                                ("segments.csv", R.SEGMENT_COLUMNS, bill_rows),
                                ("sacct_segments.csv", R.SACCT_COLUMNS, sacct_rows)):
        with open(os.path.join(run_dir, name), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(columns)
            w.writerows(rows)
    W.write_csv(workload, os.path.join(run_dir, "workload.csv"))
    return run_dir
