"""The steady-state report (tools/replay/steady.py) and the warm-up
(report.measured) on the hand-made run of test_report.py, worked out by
hand in the comments."""
import json
import math
import os

import pytest

from tools.replay import report as R
from tools.replay import steady as S

from tools.replay import workload as W

from test_report import JOBS, META, write_run


def on_time(d, late=0.0):
    """The run's workload.csv with each job due when Slurm got it, less
    `late` wall seconds (k=10)."""
    W.write_csv([W.Job(j[0], (j[4] - META["t0"] - late) * META["k"], 10.0, float(j[3]), 1, 0,
                       j[2], False) for j in JOBS], os.path.join(d, "workload.csv"))
    return d


def test_the_warm_up_leaves_out_what_it_holds(tmp_path):
    run = R.Run(write_run(str(tmp_path / "planc-1")))
    # k=10: half a trace hour is 180 s wall, the window starts at 1180.
    m = R.measured(run, 0.5)
    assert m.t0 == 1180 and run.t0 == 1000
    # Eligible after 1180: only w000003 (waits 50 s: misses the SLA).
    assert [j["name"] for j in m.jobs] == ["w000003"]
    k = R.compute_kpis(m)
    assert k["p0_sla"] == 0.0 and k["p1_sla"] is None
    # Allocation over [1180, 1360] x 8 GPUs = 1440: 11/1 2 x 70, 12 4 x 120,
    # 13 1 x 110, 17 1 x 180 = 910.
    assert k["utilisation"] == pytest.approx(910 / 1440)
    # w000004's preemption (at 1100) is the warm-up's: no P3 run ends
    # preempted after 1180; w000017 still runs, counted.
    assert k["p3_rate_submitted_by_hour"] == [0.0]
    assert k["lost_gpu_hours"] == 0
    # Nothing discarded without a warm-up.
    assert R.measured(run, 0) is run
    with pytest.raises(R.Problem):
        R.measured(run, 1.0)


def test_submission_lag_is_slurms_submit_time_against_the_workloads_clock(tmp_path):
    d = on_time(write_run(str(tmp_path / "r")), late=6.0)
    lag = R.submission_lag(R.Run(d))
    assert lag["p50"] == pytest.approx(6.0) and lag["max"] == pytest.approx(6.0)
    assert lag["p99_trace_minutes"] == pytest.approx(1.0)  # 6 s x k=10


def test_interval_is_students_t():
    iv = S.interval([1.0, 2.0, 3.0])
    # mean 2, s = 1, t(2) = 4.303: 2 +- 4.303 / sqrt(3)
    assert iv["mean"] == 2.0 and iv["runs"] == 3
    assert iv["high"] - 2.0 == pytest.approx(4.303 / math.sqrt(3))
    one = S.interval([5.0, None])
    assert (one["mean"], one["low"], one["runs"]) == (5.0, None, 1)
    assert S.interval([])["mean"] is None


def test_a_target_is_judged_on_the_whole_interval():
    iv = {"mean": 0.08, "low": 0.05, "high": 0.11, "runs": 3}
    assert S.judge(iv, "<=", 0.10) == "undecided"
    assert S.judge(dict(iv, high=0.095), "<=", 0.10) == "met"
    assert S.judge(dict(iv, low=0.101, mean=0.2, high=0.3), "<=", 0.10) == "missed"
    assert S.judge({"mean": 0.999, "low": 0.9991, "high": 1.0, "runs": 3}, ">=", 0.999) == "met"
    assert S.judge({"mean": 0.5, "low": None, "high": None, "runs": 1}, "<=", 1) \
        == "met (one run)"


def test_plan_c_against_stock_is_paired_by_seed():
    kpis = [{"config": "stock", "seed": 1, "x": 10.0}, {"config": "planc", "seed": 1, "x": 15.0},
            {"config": "stock", "seed": 2, "x": 20.0}, {"config": "planc", "seed": 2, "x": 20.0},
            {"config": "planc", "seed": 3, "x": 99.0}]  # no stock run on seed 3: left out
    iv = S.paired(kpis, "x", "planc")
    assert iv["values"] == [1.5, 1.0] and iv["mean"] == 1.25


def _steady_dir(tmp_path, late=0.0, configs=("stock", "planc")):
    root = tmp_path / "runs"
    for seed in (1, 2):
        for config in configs:
            meta = dict(META, config=config, run=seed, window_end=1360,
                        source={"commit": "abc", "modified": False}, warmup_hours=0.0)
            on_time(write_run(str(root / "load-1.1" / f"{config}-{seed}"), meta=meta), late)
    return str(root)


def test_the_summary_says_configuration_kpi_interval_and_runs(tmp_path):
    root = _steady_dir(tmp_path)
    out = str(tmp_path / "out")
    assert S.main([root, "--out", out, "--no-plots"]) == 0
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    load = s["loads"]["1.1"]
    u = load["configs"]["planc"]["utilisation"]
    assert u["runs"] == 2 and u["mean"] == pytest.approx(1910 / 2880)
    assert u["low"] == pytest.approx(u["mean"]) == pytest.approx(u["high"])
    lost = [t for t in load["targets"] if t["kpi"] == "p0_sla_every"][0]
    assert lost["verdict"] == "missed" and lost["config"] == "planc"
    assert {r["commit"] for r in load["runs"]} == {"abc"}
    assert s["invalid"] == []
    with open(os.path.join(out, "report.md")) as f:
        text = f.read()
    assert "## Offered load 1.1" in text and "| P0 SLA, every submission >= 99.90% | planc | 2 |" \
        in text


def test_a_load_of_stock_runs_alone_says_no_target_is_judged(tmp_path):
    root = _steady_dir(tmp_path, configs=("stock",))
    out = str(tmp_path / "out")
    assert S.main([root, "--out", out, "--no-plots"]) == 0
    with open(os.path.join(out, "summary.json")) as f:
        assert json.load(f)["loads"]["1.1"]["targets"] == []
    with open(os.path.join(out, "report.md")) as f:
        text = f.read()
    assert "None judged" in text and "runs of stock only" in text
    assert "| target | configuration |" not in text


def test_a_run_whose_submissions_fell_behind_is_left_out(tmp_path):
    # 100 s wall late at k=10 = 16.7 trace minutes: past 15.
    root = _steady_dir(tmp_path, late=100.0)
    assert S.main([root, "--out", str(tmp_path / "out"), "--no-plots"]) == 2
    by_load, invalid = S.load_runs(root, None)
    assert not by_load and len(invalid) == 4
    assert "submissions late" in invalid[0]["why"][0]


def test_the_ceiling_runs_the_workload_as_the_replay_does(tmp_path):
    # A fractional GPU runs on a whole card and no job is shorter than one
    # wall second: halving a card or shortening a job under k changes
    # nothing in the ceiling.
    whole = R.compute_kpis(R.Run(on_time(write_run(str(tmp_path / "w")))))
    d = write_run(str(tmp_path / "f"))
    W.write_csv([W.Job(j[0], (j[4] - META["t0"]) * META["k"], 1.0 if j[0] == "w000006" else 10.0,
                       0.5 if j[0] == "w000005" else float(j[3]), 1, 0, j[2], False)
                 for j in JOBS], os.path.join(d, "workload.csv"))
    frac = R.compute_kpis(R.Run(d))
    assert whole["utilisation_ceiling"] == pytest.approx(frac["utilisation_ceiling"])
    assert whole["utilisation_ceiling"] > 0
    # Over the ceiling: the workload's own allocation, replicas apart.
    assert whole["utilisation_of_ceiling"] == pytest.approx(
        whole["utilisation_workload"] / whole["utilisation_ceiling"])
