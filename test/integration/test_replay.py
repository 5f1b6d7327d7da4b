"""planc-replay's quick mode, as CI runs it: the reference workload
(workloads/reference.csv: 100 jobs, 1 h of trace time, 32 GPUs) through stock
Slurm (preempt/qos) and through Plan C, each on a private 4-node cluster of its
own started fresh, at k = 40; then the report.  It must be complete (every
KPI of both configurations, the plots) and consistent: the run segments the
bills count are the ones slurmdbd has, every workload job appears, each
tier's GPU-seconds add up (tools/replay/report.py check_consistency)."""
import csv
import json
import os
import subprocess
import sys

from conftest import ROOT, worker_overrides

REPLAY = os.path.join(ROOT, "tools", "planc-replay")
sys.path.insert(0, ROOT)


def test_quick_replay_stock_and_planc_report_is_complete_and_consistent(tmp_path):
    # A cluster of its own beside this worker's others (ports +150..+163;
    # worker_overrides has added the 150 already: adding it again put gw1's
    # replay on gw2's 1-node cluster's ports, and MariaDB found its port busy).
    o = worker_overrides(offset=150)
    env = dict(os.environ,
               PLANC_REPLAY_DIR=o.get("PLANC_CLUSTER_DIR", "/tmp/planc-cluster") + "-replay",
               PLANC_REPLAY_PORT_BASE=o.get("PLANC_PORT_BASE", "17950"))
    out = str(tmp_path / "replay")
    p = subprocess.run([REPLAY, "quick", "--out", out], env=env, capture_output=True, text=True,
                       timeout=2400)
    print(p.stderr[-3000:])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    report = open(os.path.join(out, "report.md")).read()
    print(report[:4000])
    for what in ("P0 SLA attainment", "P2 mean run", "P3 preemption rate, mean hour",
                 "Preemptions per P2 job in 24 h, max", "GPU utilisation", "Wait p99 P3",
                 "Lost GPU-hours", "Revenue", "| stock (1 run) |", "| planc (1 run) |"):
        assert what in report, f"report.md says nothing of {what}"
    for png in ("gpus_in_use.png", "wait_cdf.png", "preemptions_per_job.png"):
        path = os.path.join(out, png)
        assert os.path.getsize(path) > 5000, f"{png} is missing or empty"

    from tools.replay import report as R
    names = {row["name"] for row in csv.DictReader(open(os.path.join(ROOT, "workloads",
                                                                      "reference.csv")))}
    for config in ("stock", "planc"):
        run = os.path.join(out, f"{config}-1")
        assert R.check_consistency(run) == [], config
        meta = json.load(open(os.path.join(run, "run.json")))
        assert meta["config"] == config and not meta["refused"], meta
        jobs = list(csv.DictReader(open(os.path.join(run, "jobs.csv"))))
        assert {j["name"] for j in jobs} == names
        # Something ran and the guaranteed tiers got in under contention.
        started = [j for j in jobs if j["first_start"]]
        assert len(started) >= len(jobs) // 2, (config, len(started))
        assert any(j["tier"] == "P0" and j["first_start"] for j in jobs), config
        segs = list(csv.DictReader(open(os.path.join(run, "segments.csv"))))
        assert any(s["state"] == "PREEMPTED" or s["zero_reason"].startswith("preempted")
                   for s in segs), f"{config}: the reference workload preempted nothing"
