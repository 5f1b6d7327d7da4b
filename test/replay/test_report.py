"""tools/replay/report.py on small hand-made run directories whose KPIs
are worked out by hand in the comments."""
import copy
import csv
import json
import os

import pytest

from tools.replay import report as R
from tools.replay import workload as W

import toy_cluster

# One trace hour at k=10: wall [1000, 1360], 8 GPUs (2880 wall GPU-seconds).
META = {"config": "planc", "run": 1, "k": 10, "t0": 1000, "end": 1360, "gpus_total": 8,
        "workload": "workload.csv"}

# name, job_id, tier, gpus, submit, eligible, first_start, end, final_state, restarts
JOBS = [
    ("w000001", 11, "P2", 2, 1000, 1000, 1000, 1250, "COMPLETED", 1),  # preempted once by w000002
    ("w000002", 12, "P0", 4, 1095, 1095, 1100, 1300, "COMPLETED", 0),  # waits 5 s: in the SLA
    ("w000003", 13, "P0", 1, 1200, 1200, 1250, 1360, "CANCELLED", 0),  # waits 50 s: misses it
    ("w000004", 14, "P3", 2, 1000, 1000, 1010, 1360, "CANCELLED", 1),  # preempted, then pending
    ("w000005", 15, "P3", 1, 1000, 1000, "", 1360, "CANCELLED", 0),    # never started
    ("w000006", 16, "P1", 1, 1020, 1020, 1030, 1090, "COMPLETED", 0),
    ("w000007", 17, "P3", 1, 1000, 1000, 1000, 1360, "CANCELLED", 0),  # runs to the end
]
PRE = "preempted: unfinished preempted time is not billed"
# job_id, segment, tier, start, end, state, gpu_cards, amount_micros, zero_reason
BILLS = [
    (11, 0, "P2", 1000, 1100, "PREEMPTED", 2, 0, PRE),
    (11, 1, "P2", 1150, 1250, "COMPLETED", 2, 100, ""),
    (12, 0, "P0", 1100, 1300, "COMPLETED", 4, 1000, ""),
    (13, 0, "P0", 1250, 1360, "CANCELLED", 1, 200, ""),
    (14, 0, "P3", 1010, 1100, "PREEMPTED", 2, 0, PRE),
    (14, 1, "P3", 1360, 1360, "CANCELLED", 2, 0, "never ran"),
    (15, 0, "P3", 1360, 1360, "CANCELLED", 1, 0, "never ran"),
    (16, 0, "P1", 1030, 1090, "COMPLETED", 1, 50, ""),
    (17, 0, "P3", 1000, 1360, "CANCELLED", 1, 300, ""),
]


def write_run(d, meta=META, jobs=JOBS, bills=BILLS, sacct=None):
    """A run directory from the rows above; card_seconds = cards x length,
    slurmdbd's runs = the bills' (sacct's "CANCELLED by 0" kept as it is)."""
    bill_rows = [(job_id, seg, tier, start, end, state, cards, cards * (end - start), micros, zero)
                 for job_id, seg, tier, start, end, state, cards, micros, zero in bills]
    if sacct is None:
        sacct = [(b[0], b[3], b[4], b[5] if b[5] != "CANCELLED" else "CANCELLED by 0")
                 for b in bills if b[8] != "never ran"]
    workload = [W.Job(j[0], 0.0, 10.0, float(j[3]), 1, 0, j[2], j[2] == "P2") for j in jobs]
    return toy_cluster.write_run_dir(d, meta, jobs, bill_rows, sacct, workload)


@pytest.fixture
def basic(tmp_path):
    return write_run(str(tmp_path / "planc-1"))


def test_kpis_by_hand(basic):
    k = R.compute_kpis(R.Run(basic))
    # SLA (wall 40 s): P0 w000002 waited 5 s, w000003 50 s -> 1 of 2; P1 1 of 1.
    assert k["p0_sla"] == 0.5 and k["p1_sla"] == 1.0
    assert k["p0_start_p99_wall"] == 50
    # P2 mean run: two P2 segments of 100 s wall = 1000 s trace each.
    assert k["p2_mean_run_h"] == pytest.approx(1000 / 3600)
    assert (k["p2_segments"], k["p2_segments_preempted"]) == (2, 1)
    # P3, the one trace hour: 1 preempted (w000004) over 2 runs ended in it
    # (w000004's, and w000007's cancelled at the end); nothing running after.
    assert k["p3_rate_by_hour"] == [0.5]
    assert k["p3_preempt_rate_mean"] == 0.5 and k["p3_preempt_rate_worst"] == 0.5
    assert k["p2_preempt_24h_max"] == 1 and k["p2_preempt_24h_p99"] == 1
    # Utilisation: 400 + 800 + 110 + 180 + 60 + 360 = 1910 of 2880 GPU-s.
    assert k["utilisation"] == pytest.approx(1910 / 2880)
    assert k["utilisation_by_tier"]["P0"] == pytest.approx(910 / 2880)
    # P0+P1 peak: w000002 (4) and w000003 (1) overlap in 1250-1300 -> 5 of 8.
    assert k["guaranteed_peak_share"] == pytest.approx(5 / 8)
    # Waits in trace seconds (x10), nearest-rank percentiles.
    assert (k["wait_p50_P0"], k["wait_p99_P0"]) == (50, 500)
    assert (k["wait_p50_P3"], k["wait_p99_P3"]) == (0, 100)
    assert k["wait_p50_P1"] == 100
    # The longest P3 wait: w000005 never started, 360 s wall to the end.
    assert k["p3_longest_wait"] == 3600 and k["p3_longest_wait_never_started"]
    # Lost: 2 GPUs x 1000 s (P2) + 2 GPUs x 900 s (P3) of trace time.
    assert k["lost_gpu_hours_by_tier"]["P2"] == pytest.approx(2000 / 3600)
    assert k["lost_gpu_hours"] == pytest.approx(3800 / 3600)
    # Revenue: 1650 micro-units billed, x k.
    assert k["revenue"] == pytest.approx(0.0165)
    assert k["revenue_by_tier"]["P0"] == pytest.approx(0.012)
    assert k["p0_never_started"] == 0 and k["jobs"] == 7 and k["segments"] == 7


def test_a_run_kept_gzipped_reads_as_it_was_written(basic):
    # The committed runs keep their CSV files gzipped: the report reads them.
    import gzip
    import shutil
    want = R.compute_kpis(R.Run(basic))
    for name in os.listdir(basic):
        if name.endswith(".csv"):
            path = os.path.join(basic, name)
            with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.remove(path)
    run = R.Run(basic)
    assert run.problems == [] and R.compute_kpis(run) == want
    assert R.check_consistency(basic) == []


def test_brief_example_one_p2_preempted_after_100s(tmp_path):
    # One P2 job preempted once after 100 s at k=10: P2 mean run 1000 s trace.
    jobs = [("w000001", 1, "P2", 1, 1000, 1000, 1000, 1100, "PREEMPTED", 0)]
    bills = [(1, 0, "P2", 1000, 1100, "PREEMPTED", 1, 0, PRE)]
    d = write_run(str(tmp_path / "r"), jobs=jobs, bills=bills)
    k = R.compute_kpis(R.Run(d))
    assert k["p2_mean_run_h"] * 3600 == pytest.approx(1000)
    assert k["p0_sla"] is None and k["p3_preempt_rate_mean"] is None  # no 0/0
    assert R.check_consistency(d) == []


def test_basic_run_is_consistent(basic):
    assert R.check_consistency(basic) == []


def test_held_jobs_leave_the_sla_as_the_metric_does(tmp_path):
    jobs = [list(j) + [""] for j in JOBS]
    jobs[2][-1] = "limit"  # w000003 pended on the 80% cap: not counted
    cols = R.JOB_COLUMNS + ("held_reason",)
    d = write_run(str(tmp_path / "r"))
    with open(os.path.join(d, "jobs.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        w.writerows(jobs)
    k = R.compute_kpis(R.Run(d))
    assert k["p0_sla"] == 1.0 and k["p0_sla_all"] == 0.5 and k["p0_sla_counted"] == 1


def test_free_attempt_counts_as_p2_run_and_p3_job(tmp_path):
    # A P3 job upgraded to a free P2 attempt (the bill says P2, free) and
    # preempted: a P2 run segment, but a P3 job's preemption per job.
    jobs = [("w000001", 1, "P3", 1, 1000, 1000, 1000, 1360, "CANCELLED", 1)]
    bills = [(1, 0, "P2", 1000, 1200, "PREEMPTED", 1, 0, PRE),
             (1, 1, "P3", 1360, 1360, "CANCELLED", 1, 0, "never ran")]
    d = write_run(str(tmp_path / "r"), jobs=jobs, bills=bills)
    k = R.compute_kpis(R.Run(d))
    assert k["p2_segments"] == 1 and k["p2_preempt_24h_max"] is None
    assert k["preemptions_per_job"]["P3"] == [1]
    assert R.check_consistency(d) == []


def test_preemptions_in_any_24h_window(tmp_path):
    # k=60: a trace day is 1440 wall s.  Preemptions end at 100, 200, 1500
    # and 1600 wall s after t0: [100, 1540) holds 3, [200, 1640) holds 3.
    meta = dict(META, k=60, end=1000 + 3000)
    ends = [1100, 1200, 2500, 2600]
    starts = [1000, 1150, 2400, 2550]
    bills = [(1, i, "P2", s, e, "PREEMPTED", 1, 0, PRE) for i, (s, e) in enumerate(zip(starts, ends))]
    bills.append((1, 4, "P2", 2700, 2800, "COMPLETED", 1, 10, ""))
    jobs = [("w000001", 1, "P2", 1, 1000, 1000, 1000, 2800, "COMPLETED", 4),
            ("w000002", 2, "P2", 1, 1000, 1000, 1000, 1100, "COMPLETED", 0)]
    bills.append((2, 0, "P2", 1000, 1100, "COMPLETED", 1, 10, ""))
    d = write_run(str(tmp_path / "r"), meta=meta, jobs=jobs, bills=bills)
    k = R.compute_kpis(R.Run(d))
    assert k["p2_preempt_24h_max"] == 3
    assert k["p2_preempt_24h_p99"] == 3 and sorted(k["preemptions_per_job"]["P2"]) == [0, 4]
    # Segments by trace day (ends: day 0 up to 1440 s wall after t0).
    assert sorted(k["p2_mean_run_h_by_day"]) == [0, 1]
    assert R.check_consistency(d) == []
    assert R.max_in_window([0, 10, 20, 100000], 86400) == 3
    assert R.max_in_window([], 5) == 0


def test_p3_rate_over_several_hours(tmp_path):
    # k=3600: a trace hour is 1 wall s.  Hour 0 (1000, 1001]: nothing ends,
    # one P3 run (A) running at 1001 -> 0/1.  Hour 1 (1001, 1002]: A ends
    # preempted, B runs at 1002 -> 1/2.  Hour 2: B ends at 1003 -> 0/1.
    # Hour 3 (1003, 1004]: no P3 run -> no value.
    meta = dict(META, k=3600, end=1004)
    jobs = [("w000001", 1, "P3", 1, 1000, 1000, 1000, 1002, "PREEMPTED", 0),
            ("w000002", 2, "P3", 1, 1000, 1000, 1001, 1003, "COMPLETED", 0)]
    bills = [(1, 0, "P3", 1000, 1002, "PREEMPTED", 1, 0, PRE),
             (2, 0, "P3", 1001, 1003, "COMPLETED", 1, 5, "")]
    d = write_run(str(tmp_path / "r"), meta=meta, jobs=jobs, bills=bills)
    k = R.compute_kpis(R.Run(d))
    assert k["p3_rate_by_hour"] == [0.0, 0.5, 0.0, None]
    assert k["p3_preempt_rate_mean"] == pytest.approx(0.5 / 3)
    assert k["p3_preempt_rate_worst"] == 0.5


def test_grace_ending_counts_as_preemption(tmp_path):
    # Without jobcomp/planc's state, a victim that exited in its grace keeps
    # COMPLETED; its bill's zero_reason still says preempted.
    jobs = [("w000001", 1, "P2", 1, 1000, 1000, 1000, 1100, "COMPLETED", 0)]
    bills = [(1, 0, "P2", 1000, 1100, "COMPLETED", 1, 0,
              "preempted: completed during its grace; unfinished preempted time is not billed")]
    d = write_run(str(tmp_path / "r"), jobs=jobs, bills=bills)
    k = R.compute_kpis(R.Run(d))
    assert k["lost_gpu_hours"] == pytest.approx(1000 / 3600)
    assert k["preemptions_per_job"]["P2"] == [1]


def test_inconsistent_run_lists_each_problem(tmp_path):
    bills = copy.deepcopy(BILLS)
    bills[4] = (14, 0, "P3", 1100, 1010, "PREEMPTED", 2, 0, PRE)   # ends before it starts
    sacct = [(b[0], b[3], b[4], b[5]) for b in BILLS if b[8] != "never ran"]
    del sacct[2]                                                    # job 12's run not in slurmdbd
    sacct[0] = (11, 1000, 1100, "REQUEUED")                         # state differs
    sacct.append((99, 1200, 1210, "COMPLETED"))                     # a run with no bill
    jobs = JOBS[:-1]                                                # w000007 missing from jobs.csv
    d = write_run(str(tmp_path / "bad"), jobs=jobs, bills=bills, sacct=sacct)
    W.write_csv([W.Job(j[0], 0.0, 10.0, float(j[3]), 1, 0, j[2], False) for j in JOBS],
                os.path.join(d, "workload.csv"))
    # A bill whose card-seconds do not match its cards x length.
    rows = list(csv.reader(open(os.path.join(d, "segments.csv"))))
    rows[3][7] = "9999"  # job 12's card_seconds
    with open(os.path.join(d, "segments.csv"), "w", newline="") as f:
        csv.writer(f).writerows(rows)
    problems = R.check_consistency(d)
    text = "\n".join(problems)
    assert "1 job(s) of the workload missing from jobs.csv: w000007" in text
    assert "segments.csv: job 14 segment 0 ends before it starts" in text
    assert "run of job 12 started 1100: billed, not in slurmdbd" in text
    assert "run of job 99 started 1200: in slurmdbd, not billed" in text
    assert "run of job 11 started 1000: bill says PREEMPTED, slurmdbd REQUEUED" in text
    assert "segments.csv: job 12 segment 0: card_seconds 9999 but gpu_cards x length = 800" in text
    assert "P0: bills' card-seconds" in text
    assert "segments.csv: job 17 segment 0: job id not in jobs.csv" in text


def test_restart_count_and_overallocation(tmp_path):
    jobs = [list(j) for j in JOBS]
    jobs[0][9] = 2  # Slurm says two requeues, the bills show one
    meta = dict(META, gpus_total=6)  # 7 GPUs are in use in 1150-1250
    d = write_run(str(tmp_path / "r"), meta=meta, jobs=jobs)
    text = "\n".join(R.check_consistency(d))
    assert "job w000001: 2 bill(s) but Slurm's restart count 2 says 3" in text
    assert "7 GPUs allocated at 1150, the pool has 6" in text


def test_a_run_requeued_and_cancelled_before_slurmdbd_recorded_the_requeue(tmp_path):
    # w000004 (job 14) preempted and requeued, then cancelled pending at
    # the window's end before slurmdbd had the requeued job's record:
    # sacct's last record is PREEMPTED, its records count no restart, and
    # the bills are the preempted run and the "never ran" one.  Consistent.
    # With a second run billed instead of "never ran", it is not.
    jobs = [list(j) for j in JOBS]
    jobs[3][8], jobs[3][9] = "PREEMPTED", 0
    d = write_run(str(tmp_path / "r"), jobs=jobs)
    assert R.check_consistency(d) == []
    jobs[0][8], jobs[0][9] = "PREEMPTED", 0  # job 11: two runs billed
    d = write_run(str(tmp_path / "r2"), jobs=jobs)
    assert "job w000001: 2 bill(s) but Slurm's restart count 0 says 1" in "\n".join(
        R.check_consistency(d))


def test_market_mode_is_a_third_config_and_p2_revenue_is_its_bills(tmp_path):
    d = write_run(str(tmp_path / "m"), meta=dict(META, config="planc-market"))
    assert R.check_consistency(d) == []
    k = R.compute_kpis(R.Run(d))
    assert k["config"] == "planc-market"
    assert k["revenue_P2"] == pytest.approx(k["revenue_by_tier"]["P2"])
    bad = write_run(str(tmp_path / "x"), meta=dict(META, config="other"))
    assert ("run.json: config 'other' is not one of stock, planc, planc-nobudget, planc-market, planc-infusion"
            in R.check_consistency(bad))
    assert R.config_order(["planc-market", "planc", "stock"]) == ["stock", "planc",
                                                                  "planc-market"]


def test_refused_submissions_are_counted_not_missing(tmp_path):
    d = write_run(str(tmp_path / "r"))
    meta = json.load(open(os.path.join(d, "run.json")))
    wl = os.path.join(d, meta.get("workload", "workload.csv"))
    if not os.path.exists(wl):
        pytest.skip("the fixture has no workload file")
    with open(wl) as f:
        first = f.readlines()[1].split(",")[0]
    # Dropped from jobs.csv and refused: consistent, and the run says so.
    rows = open(os.path.join(d, "jobs.csv")).readlines()
    with open(os.path.join(d, "jobs.csv"), "w") as f:
        f.writelines(r for r in rows if not r.startswith(first + ","))
    assert any("missing from jobs.csv" in p for p in R.check_consistency(d))
    meta["refused"] = {first: "sbatch: error: Socket timed out on send/recv operation"}
    with open(os.path.join(d, "run.json"), "w") as f:
        json.dump(meta, f)
    assert not any("missing from jobs.csv" in p for p in R.check_consistency(d))


def test_unreadable_run(tmp_path):
    d = str(tmp_path / "r")
    os.makedirs(d)
    assert "run.json unreadable" in R.check_consistency(d)[0]
    with open(os.path.join(d, "run.json"), "w") as f:
        json.dump({"config": "stock"}, f)
    assert "run.json lacks run, k, t0, end, gpus_total" in R.check_consistency(d)[0]
    write_run(d)
    os.remove(os.path.join(d, "sacct_segments.csv"))
    assert "sacct_segments.csv: missing" in R.check_consistency(d)


def test_compare_table_mean_spread_and_verdicts():
    runs = [
        {"config": "stock", "p0_sla_every": 0.990, "utilisation": 0.85,
         "p2_run_per_preemption_h": 1.0, "p2_mean_run_h": 6.0},
        {"config": "stock", "p0_sla_every": 0.996, "utilisation": 0.75,
         "p2_run_per_preemption_h": 3.0, "p2_mean_run_h": 6.0},
        {"config": "planc", "p0_sla_every": 1.0, "utilisation": 0.55,
         "p2_run_per_preemption_h": 5.0},
        {"config": "planc", "p0_sla_every": 0.999, "utilisation": 0.57,
         "p2_run_per_preemption_h": None},
    ]
    md = R.compare(runs)
    lines = {l.split(" | ")[0].lstrip("| "): l for l in md.splitlines()}
    assert md.splitlines()[0].startswith("| KPI | target (alert) | stock (2 runs) | | planc (2 runs)")
    label = "P0 SLA attainment, every submission (start <= 40 s wall)"
    assert lines[label] == (
        f"| {label} | >= 99.90% (< 99.50%) | "
        "99.30% (99.00% – 99.60%) | missed, alert | 99.95% (99.90% – 100.00%) | met |")
    assert "| GPU utilisation | >= 80.00% (< 60.00%) | 80.00% (75.00% – 85.00%) | met | " \
           "56.00% (55.00% – 57.00%) | missed, alert |" in md
    # A run without a value is left out of the mean, not counted as 0.
    assert "| P2 mean run before interruption: P2 run-hours per preemption | >= 4.00 h " \
           "(< 2.00 h) | 2.00 h (1.00 h – 3.00 h) | missed | 5.00 h | met |" in md
    # The plain segment mean is shown, labelled, without a verdict.
    assert "| P2 mean segment (every P2 segment; not section 9's) |  | 6.00 h (6.00 h – 6.00 h) " \
           "|  | - | |" in md
    assert R.verdict(0.995, (">=", 0.999), ("<", 0.995)) == "missed"  # strict, as the alerts
    assert R.verdict(None, (">=", 0.999), None) == ""


def test_cli_writes_report_and_plots(tmp_path):
    dirs = []
    for config in ("stock", "planc"):
        for n in (1, 2):
            dirs.append(write_run(str(tmp_path / f"{config}-{n}"),
                                  meta=dict(META, config=config, run=n)))
    out = str(tmp_path / "out")
    assert R.main(dirs + ["--out", out]) == 0
    md = open(os.path.join(out, "report.md")).read()
    assert "| P0 SLA attainment, every submission (start <= 40 s wall) | >= 99.90% (< 99.50%) | " \
           "50.00% " in md
    assert "### stock, run 2" in md and "### planc, run 1" in md
    for png in ("gpus_in_use.png", "wait_cdf.png", "preemptions_per_job.png"):
        data = open(os.path.join(out, png), "rb").read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
        assert f"]({png})" in md
    # A broken run: exit 3 and its problems in the report.
    os.remove(os.path.join(dirs[0], "sacct_segments.csv"))
    assert R.main(dirs + ["--out", out]) == 3
    assert "sacct_segments.csv: missing" in open(os.path.join(out, "report.md")).read()


def test_reference_workload_through_a_toy_cluster(tmp_path):
    # The quick mode's shape end to end: workloads/reference.csv (100 jobs,
    # 32 GPUs, 1 h) at k=20 through a toy scheduler, both configs twice.
    here = os.path.dirname(os.path.abspath(__file__))
    jobs = W.read_csv(os.path.join(here, "..", "..", "workloads", "reference.csv"))
    dirs = [toy_cluster.simulate(jobs, str(tmp_path / f"{c}-{n}"), 20, 32, 1, config=c, run=n)
            for c in ("stock", "planc") for n in (1, 2)]
    for d in dirs:
        assert R.check_consistency(d) == []
    k = R.compute_kpis(R.Run(dirs[0]))
    assert k["jobs"] == 100
    assert 0.5 < k["utilisation"] <= 1.0
    assert k["lost_gpu_hours"] > 0 and k["p3_preempt_rate_worst"] > 0  # offered load 1.24
    assert k["guaranteed_peak_share"] <= 0.80
    out = str(tmp_path / "out")
    text, problems = R.write_report(dirs, out)
    assert all(p == [] for p in problems.values())
    assert "stock (2 runs)" in text and "planc (2 runs)" in text


def test_guaranteed_job_submitted_in_the_last_40_s_is_not_never_started(tmp_path):
    # Two P1 jobs never started: one eligible 300 s before the end (counted),
    # one 10 s before it (no chance to start within the SLA: left out).
    jobs = JOBS + [("w000008", 18, "P1", 1, 1060, 1060, "", 1360, "CANCELLED", 0),
                   ("w000009", 19, "P1", 1, 1350, 1350, "", 1360, "CANCELLED", 0)]
    bills = BILLS + [(18, 0, "P1", 1360, 1360, "CANCELLED", 1, 0, "never ran"),
                     (19, 0, "P1", 1360, 1360, "CANCELLED", 1, 0, "never ran")]
    d = write_run(str(tmp_path / "r"), jobs=jobs, bills=bills)
    k = R.compute_kpis(R.Run(d))
    assert k["p1_never_started"] == 1


def test_infusion_mode_counts_replicas_in_utilisation_and_operations_per_hour(tmp_path):
    # k = 10: a trace hour is 360 s of wall time, the whole run.
    meta = dict(META, config="planc-infusion",
                infusion={"max_per_hour": 4, "limit_window_seconds": 360})
    d = write_run(str(tmp_path / "i"), meta=meta)
    plain = R.compute_kpis(R.Run(write_run(str(tmp_path / "p"))))
    with open(os.path.join(d, "replicas.csv"), "w") as f:
        f.write("job_id,segment,tier,start,end,gpu_cards,state,zero_reason,pool\n"
                "90,0,P1,1000,1180,2,CANCELLED,,replay-api\n"       # 2 cards x 180 s
                "91,0,P3,900,1100,1,CANCELLED,,replay-spot\n"       # 1 x 100 s in the window
                "92,0,P3,1360,1360,1,CANCELLED,never ran,replay-spot\n")
    with open(os.path.join(d, "infusion_ops.csv"), "w") as f:
        f.write("at,action,pool\n1000,grew,replay-spot\n1090,grew,replay-api\n"
                "1200,shrank,replay-api\n1250,gave back,replay-api\n1251,gave back,replay-api\n")
    assert R.check_consistency(d) == []
    k = R.compute_kpis(R.Run(d))
    pool = 8 * 360
    assert k["utilisation_replicas"] == pytest.approx((2 * 180 + 100) / pool)
    assert k["utilisation"] == pytest.approx(plain["utilisation"] + (2 * 180 + 100) / pool)
    assert k["utilisation_workload"] == pytest.approx(plain["utilisation"])
    assert k["revenue"] == pytest.approx(plain["revenue"])  # replicas are internal cost
    assert k["p0_sla"] == plain["p0_sla"]
    # Give-backs to waiting guaranteed work are outside the hourly limit.
    assert (k["infusion_ops_per_hour"], k["infusion_ops_per_hour_max"]) == ([3], 3)
    assert k["infusion_gave_back_per_hour_max"] == 2 and k["infusion_ops_total"] == 5
    # A run without infusion has no such figures.
    assert plain["utilisation_replicas"] is None and plain["infusion_ops_per_hour_max"] is None


def test_start_lateness_from_slurmctlds_log_in_its_own_time_zone(basic):
    # slurmctld logs local time: here 8 hours ahead of the run's epoch
    # seconds (wall 1000 = 08:16:40); the submissions give the offset.
    log = """[1970-01-01T08:16:40.000] _slurm_rpc_submit_batch_job: JobId=11 InitPrio=1 usec=1
[1970-01-01T08:16:40.500] sched: Allocate JobId=11 NodeList=gpu[1-2] #CPUs=6 Partition=gpu
[1970-01-01T08:16:50.000] sched/backfill: _start_job: Started JobId=14 in gpu on gpu1
[1970-01-01T08:18:20.000] Requeuing JobId=14
[1970-01-01T08:18:22.000] sched: Allocate JobId=12 NodeList=gpu1 #CPUs=12 Partition=gpu
not a log line
"""
    with open(os.path.join(basic, "slurmctld.log"), "w") as f:
        f.write(log)
    k = R.compute_kpis(R.Run(basic))
    # Job 11: eligible 1000, started 1000.5 (0.5 s); 14: eligible 1000,
    # gpu1 never used before, started 1010 (10 s); 12: eligible 1095, gpu1
    # given back at 1100 by 14's requeue, started 1102 (2 s).
    assert k["start_lateness_main_s"] == pytest.approx((0.5 + 2) / 2)
    assert k["start_lateness_backfill_s"] == pytest.approx(10)
    assert k["start_lateness_share"] == pytest.approx((0.5 * 2 + 10 * 2 + 2 * 4) / (8 * 360))
    # Without the log: no figure.
    os.remove(os.path.join(basic, "slurmctld.log"))
    assert R.compute_kpis(R.Run(basic))["start_lateness_share"] is None


def test_slurm_host_lists_expand_as_slurm_writes_them():
    assert R.expand_nodes("gpu[1-2,05],cpu3") == ["gpu1", "gpu2", "gpu05", "cpu3"]
    assert R.expand_nodes("gpu[09-11]") == ["gpu09", "gpu10", "gpu11"]
    assert R.expand_nodes("gpu7") == ["gpu7"]


def test_a_run_slurmdbd_lost_is_named_not_a_problem_when_slurmctlds_log_shows_it(tmp_path):
    # Job 17 started at 1000, was preempted a second later and ran again
    # from 1005; slurmdbd kept only the second run (and says it first
    # started at 1005).  The bill of the first is PREEMPTED, zero.
    def runs(first_end, again):
        # Job 17's first run 1000..first_end, its second from `again`;
        # slurmdbd without the first.
        jobs = [j if j[1] != 17 else ("w000007", 17, "P3", 1, 1000, 1000, again, 1360, "CANCELLED", 1)
                for j in JOBS]
        bills = [b for b in BILLS if b[0] != 17] + [
            (17, 0, "P3", 1000, first_end, "PREEMPTED", 1, 0, PRE),
            (17, 1, "P3", again, 1360, "CANCELLED", 1, 300, "")]
        sacct = [(b[0], b[3], b[4], b[5] if b[5] != "CANCELLED" else "CANCELLED by 0")
                 for b in bills if b[8] != "never ran" and (b[0], b[3]) != (17, 1000)]
        return dict(jobs=jobs, bills=bills, sacct=sacct)

    d = write_run(str(tmp_path / "planc-1"), **runs(1001, 1005))
    problems = R.check_consistency(d)
    assert "run of job 17 started 1000: billed, not in slurmdbd" in problems
    assert any("first start 1005 but its first bill starts at 1000" in p for p in problems)
    # slurmctld's log (UTC here) shows the start at 1000 and the requeue.
    with open(os.path.join(d, "slurmctld.log"), "w") as f:
        f.write("[1970-01-01T00:16:40.000] _slurm_rpc_submit_batch_job: JobId=11 InitPrio=1 usec=1\n"
                "[1970-01-01T00:16:40.200] sched/backfill: _start_job: Started JobId=17 in gpu on gpu1\n"
                "[1970-01-01T00:16:41.100] Requeuing JobId=17\n"
                "[1970-01-01T00:16:45.000] sched: Allocate JobId=17 NodeList=gpu2 #CPUs=3\n")
    assert R.check_consistency(d) == []
    assert R.slurmdbd_lost_runs(R.Run(d)) == {("17", 1000)}
    # Longer than LOST_RUN_SECONDS: still a problem.
    end = 1001 + R.LOST_RUN_SECONDS
    d2 = write_run(str(tmp_path / "planc-2"), **runs(end, end + 5))
    with open(os.path.join(d, "slurmctld.log")) as src, \
            open(os.path.join(d2, "slurmctld.log"), "w") as dst:
        dst.write(src.read())
    assert "run of job 17 started 1000: billed, not in slurmdbd" in R.check_consistency(d2)


def test_the_worst_p3_hours_name_their_preemptors_from_slurmctlds_log(basic):
    # w000004 (job 14, P3, 2 GPUs) was preempted at 1100 by w000002 (job
    # 12, P0, 4 GPUs), which also took w000001 (job 11, P2: not a P3 run).
    run = R.Run(basic)
    assert R.worst_p3_hours(run, R.compute_kpis(run)) == []  # no log, nothing named
    with open(os.path.join(basic, "slurmctld.log"), "w") as f:
        f.write("[1970-01-01T00:16:40.000] _slurm_rpc_submit_batch_job: JobId=11 InitPrio=1 usec=1\n"
                "[1970-01-01T00:18:20.000] preempted JobId=14 has been requeued to reclaim "
                "resources for JobId=12\n"
                "[1970-01-01T00:18:20.000] preempted JobId=11 has been requeued to reclaim "
                "resources for JobId=12\n")
    run = R.Run(basic)
    k = R.compute_kpis(run)
    assert R.log_preemptions(run) == [{"time": 1100.0, "job_id": "14", "by": "12"},
                                      {"time": 1100.0, "job_id": "11", "by": "12"}]
    worst = R.worst_p3_hours(run, k)
    assert worst == [{"hour": 0, "preempted": 1, "ran": 2, "rate": 0.5, "by": [
        {"job_id": "12", "tier": "P0", "gpus": 4, "victims": [("14", 2)],
         "fewest_p3": None}]}]  # run.json names no node count: no whole-node look
    assert ("Trace hour 0: 1 of 2 P3 runs preempted (50.0%); job 12 (P0, 4 GPUs) took 14 (2)."
            in R._run_section(run, k, []))


def test_a_run_past_its_time_limit_or_killed_by_a_preemption_frees_its_nodes(basic):
    # Neither ends with a _job_complete line in slurmctld's log: job 11's
    # time limit (1010) and job 14 killed for job 12 (1020, not requeued).
    # Their nodes are free from then: what start lateness and the spread of
    # guaranteed work count from.
    with open(os.path.join(basic, "slurmctld.log"), "w") as f:
        f.write("[1970-01-01T00:16:40.000] _slurm_rpc_submit_batch_job: JobId=11 InitPrio=1 usec=1\n"
                "[1970-01-01T00:16:40.100] sched: Allocate JobId=11 NodeList=gpu1 #CPUs=1\n"
                "[1970-01-01T00:16:40.200] sched: Allocate JobId=14 NodeList=gpu2 #CPUs=1\n"
                "[1970-01-01T00:16:50.000] Time limit exhausted for JobId=11\n"
                "[1970-01-01T00:17:00.000] preempted JobId=14 has been killed to reclaim "
                "resources for JobId=12\n"
                "[1970-01-01T00:17:10.000] sched: Allocate JobId=12 NodeList=gpu[1-2] #CPUs=2\n")
    run = R.Run(basic)
    frees = [(e["job_id"], e["time"], e["nodes"]) for e in R.log_events(run) if e["kind"] == "free"]
    assert frees == [("11", 1010.0, ["gpu1"]), ("14", 1020.0, ["gpu2"])]
    assert R.log_preemptions(run) == [{"time": 1020.0, "job_id": "14", "by": "12"}]


def test_the_fewest_p3_runs_a_whole_node_guaranteed_job_could_have_cleared(tmp_path):
    # Nodes of 4 GPUs.  At 1100 the 4-GPU P1 job 24 preempts: gpu1 holds a
    # P1 job (never cleared), gpu2 two P3 runs, gpu3 one P2 run, gpu4 one
    # P3 run and one P2 run.  One node at the fewest P3 runs: gpu3, none.
    # With gpu3's P2 job capped (3 preemptions in the window), gpu4's one.
    # Two nodes (job 26, 8 GPUs, at 1200 when gpu1 is clear): gpu1 and gpu3.
    # (Job 29, a P3 run on a fifth node, gpu5, is 24's victim in the log.)
    jobs = [("w1", 21, "P1", 1, 1000, 1000, 1001, 1150, "COMPLETED", 0),
            ("w2", 22, "P3", 2, 1000, 1000, 1002, 1360, "CANCELLED", 0),
            ("w3", 23, "P3", 2, 1000, 1000, 1003, 1360, "CANCELLED", 0),
            ("w4", 24, "P1", 4, 1099, 1099, 1101, 1360, "CANCELLED", 0),
            ("w5", 25, "P2", 4, 1000, 1000, 1004, 1360, "CANCELLED", 0),
            ("w6", 26, "P0", 8, 1199, 1199, "", 1360, "CANCELLED", 0),
            ("w7", 27, "P3", 1, 1000, 1000, 1005, 1360, "CANCELLED", 0),
            ("w8", 28, "P2", 1, 1000, 1000, 1006, 1360, "CANCELLED", 0),
            ("w9", 29, "P3", 1, 1000, 1000, 1000, 1360, "CANCELLED", 0)]
    bills = [(j[1], 0, j[2], j[6] or 1360, 1360, "CANCELLED", j[3], 10 if j[6] else 0,
              "" if j[6] else "never ran") for j in jobs]
    meta = dict(META, nodes=4, gpus_total=16, clocks={"PreemptWindow": 100})
    d = write_run(str(tmp_path / "planc-1"), meta=meta, jobs=jobs, bills=bills)
    run = R.Run(d)
    assert R.fewest_p3_to_clear(run, "24", 1100.0) is None  # no log
    log = ("[1970-01-01T00:16:40.000] _slurm_rpc_submit_batch_job: JobId=21 InitPrio=1 usec=1\n"
           "[1970-01-01T00:16:41.000] sched: Allocate JobId=21 NodeList=gpu1 #CPUs=1\n"
           "[1970-01-01T00:16:42.000] sched: Allocate JobId=22 NodeList=gpu2 #CPUs=1\n"
           "[1970-01-01T00:16:43.000] sched: Allocate JobId=23 NodeList=gpu2 #CPUs=1\n"
           "[1970-01-01T00:16:44.000] sched: Allocate JobId=25 NodeList=gpu3 #CPUs=1\n"
           "[1970-01-01T00:16:45.000] sched: Allocate JobId=27 NodeList=gpu4 #CPUs=1\n"
           "[1970-01-01T00:16:46.000] sched: Allocate JobId=28 NodeList=gpu4 #CPUs=1\n"
           "[1970-01-01T00:16:40.000] sched: Allocate JobId=29 NodeList=gpu5 #CPUs=1\n"
           "[1970-01-01T00:18:20.000] preempted JobId=29 has been requeued to reclaim "
           "resources for JobId=24\n")
    with open(os.path.join(d, "slurmctld.log"), "w") as f:
        f.write(log)
    run = R.Run(d)
    assert R.fewest_p3_to_clear(run, "24", 1100.0, gpus_per_node=4) == 0
    assert R.fewest_p3_to_clear(run, "22", 1100.0, gpus_per_node=4) is None  # not guaranteed
    assert R.fewest_p3_to_clear(run, "21", 1100.0, gpus_per_node=4) is None  # part of a node
    # gpu1 clear after 21 ends (1150): two nodes for 26, gpu1 and gpu3
    with open(os.path.join(d, "slurmctld.log"), "a") as f:
        f.write("[1970-01-01T00:19:10.000] _job_complete: JobId=21 done\n")
    run = R.Run(d)
    assert R.fewest_p3_to_clear(run, "26", 1200.0, gpus_per_node=4) == 0
    # 25 (P2, gpu3) preempted three times within the window: capped, so
    # gpu3 cannot be cleared; one node at 1100 then: gpu4, one P3 run
    with open(os.path.join(d, "slurmctld.log"), "w") as f:
        f.write(log + "".join(
            f"[1970-01-01T00:18:{s}.000] preempted JobId=25 has been requeued to reclaim "
            "resources for JobId=21\n" for s in ("01", "02", "03")))
    run = R.Run(d)
    assert R.fewest_p3_to_clear(run, "24", 1100.0, gpus_per_node=4) == 1
    # the run's total: 24 took one P3 run (29) where one was the fewest
    assert R.whole_node_p3_takes(run) == {"preemptors": 1, "taken": 1, "fewest": 1}
    assert ("Guaranteed jobs that need whole nodes took 1 P3 run (1 preemptor); the nodes "
            "each could have cleared held 1 at the fewest" in R._run_section(
                run, R.compute_kpis(run), []))
    # stock has no cap
    meta["config"] = "stock"
    with open(os.path.join(d, "run.json"), "w") as f:
        json.dump(meta, f)
    assert R.fewest_p3_to_clear(R.Run(d), "24", 1100.0, gpus_per_node=4) == 0
    # four nodes of 1 GPU when, gpu3 capped, three can be cleared: none
    assert R.fewest_p3_to_clear(run, "24", 1100.0, gpus_per_node=1) is None


def test_nodes_another_preemptor_is_clearing_are_not_counted_as_clearable(tmp_path):
    # Two nodes of 4 GPUs: at 1100 gpu1's P2 run (25) is in its grace for
    # job 30, a P0 job still pending: gpu1 is 30's, and the fewest for 24
    # is gpu2's one P3 run.  From preempt/planc's line (the grace's
    # start), or stock's (Slurm's line at the grace's end, P2GraceTime 2).
    jobs = [("w4", 24, "P1", 4, 1099, 1099, 1101, 1360, "CANCELLED", 0),
            ("w5", 25, "P2", 4, 1000, 1000, 1004, 1360, "CANCELLED", 0),
            ("w7", 27, "P3", 1, 1000, 1000, 1005, 1360, "CANCELLED", 0),
            ("w8", 28, "P2", 1, 1000, 1000, 1006, 1360, "CANCELLED", 0)]
    bills = [(j[1], 0, j[2], j[6], 1360, "CANCELLED", j[3], 10, "") for j in jobs]
    base = ("[1970-01-01T00:16:40.000] _slurm_rpc_submit_batch_job: JobId=24 InitPrio=1 usec=1\n"
            "[1970-01-01T00:16:44.000] sched: Allocate JobId=25 NodeList=gpu1 #CPUs=1\n"
            "[1970-01-01T00:16:45.000] sched: Allocate JobId=27 NodeList=gpu2 #CPUs=1\n"
            "[1970-01-01T00:16:46.000] sched: Allocate JobId=28 NodeList=gpu2 #CPUs=1\n")
    for config, line in (
            ("planc", "[1970-01-01T00:18:19.000] preempt/planc: JobId=25 (P2) preempted by "
                      "JobId=30 (P0), grace 2 s, requeue, preemption 1 in window\n"),
            ("stock", "[1970-01-01T00:18:21.000] preempted JobId=25 has been requeued to "
                      "reclaim resources for JobId=30\n")):
        meta = dict(META, config=config, nodes=2, gpus_total=8,
                    clocks={"PreemptWindow": 100, "P2GraceTime": 2})
        d = write_run(str(tmp_path / f"{config}-1"), meta=meta, jobs=jobs, bills=bills)
        with open(os.path.join(d, "slurmctld.log"), "w") as f:
            f.write(base)
        assert R.fewest_p3_to_clear(R.Run(d), "24", 1100.0, gpus_per_node=4) == 0, config
        with open(os.path.join(d, "slurmctld.log"), "a") as f:
            f.write(line)
        run = R.Run(d)
        assert R.nodes_being_cleared(run, 1100.0, "24") == {"gpu1"}, config
        assert R.nodes_being_cleared(run, 1098.0, "24") == set(), config  # not yet
        # a preemptor that never starts (cancelled, called off) clears the
        # node for a grace and a few seconds, not for ever
        assert R.nodes_being_cleared(run, 1150.0, "24") == set(), config
        assert R.fewest_p3_to_clear(run, "24", 1100.0, gpus_per_node=4) == 1, config
        # once 30 has started, the node is its own (a running P0 job)
        with open(os.path.join(d, "slurmctld.log"), "a") as f:
            f.write("[1970-01-01T00:18:22.000] sched: Allocate JobId=30 NodeList=gpu1 #CPUs=1\n")
        assert R.nodes_being_cleared(R.Run(d), 1103.0, "24") == set(), config


def test_p3_runs_a_preemptor_took_in_more_than_one_round_of_one_wait(tmp_path):
    # Job 24 (P1) takes P3 run 22 at 1100 and, not started, P3 run 23 at
    # 1101.5 (a second round; 25, a P2 run taken beside it, is not P3),
    # starts at 1102; requeued, it waits again and takes 27 and 29 at 1200
    # and 1200.3 (one round: 0.5 s apart at most).  Job 26 (P0) takes 22
    # again at 1300 in one round.  The rounds are Slurm's lines.
    jobs = [("w2", 22, "P3", 2, 1000, 1000, 1001, 1360, "CANCELLED", 1),
            ("w3", 23, "P3", 2, 1000, 1000, 1001, 1360, "CANCELLED", 1),
            ("w4", 24, "P1", 4, 1099, 1099, 1102, 1360, "CANCELLED", 1),
            ("w5", 25, "P2", 4, 1000, 1000, 1001, 1360, "CANCELLED", 1),
            ("w6", 26, "P0", 2, 1299, 1299, 1301, 1360, "CANCELLED", 0),
            ("w7", 27, "P3", 1, 1000, 1000, 1001, 1360, "CANCELLED", 1),
            ("w9", 29, "P3", 1, 1000, 1000, 1001, 1360, "CANCELLED", 1)]
    bills = [(j[1], 0, j[2], j[6], 1360, "CANCELLED", j[3], 10, "") for j in jobs]
    d = write_run(str(tmp_path / "planc-1"), jobs=jobs, bills=bills)
    assert R.repeated_p3_takes(R.Run(d)) is None  # no log

    def took(t, victim, by):
        return (f"[1970-01-01T00:{t}] preempted JobId={victim} has been requeued to reclaim "
                f"resources for JobId={by}\n")
    with open(os.path.join(d, "slurmctld.log"), "w") as f:
        f.write("[1970-01-01T00:16:39.000] _slurm_rpc_submit_batch_job: JobId=24 InitPrio=1 usec=1\n"
                + took("18:20.000", 22, 24) + took("18:21.500", 23, 24)
                + took("18:21.500", 25, 24)
                + "[1970-01-01T00:18:22.000] sched: Allocate JobId=24 NodeList=gpu1 #CPUs=1\n"
                + took("20:00.000", 27, 24) + took("20:00.300", 29, 24)
                + "[1970-01-01T00:20:01.000] sched: Allocate JobId=24 NodeList=gpu2 #CPUs=1\n"
                + took("21:40.000", 22, 26))
    run = R.Run(d)
    assert R.repeated_p3_takes(run) == {
        "waits": 3, "earlier": 1,
        "repeats": [{"job_id": "24", "tier": "P1", "rounds": [(0.0, 1), (1.5, 1)]}]}
    assert ("Of 3 waits in which a preemptor took P3 runs, 1 took them in more than one round "
            "(1 P3 run in the rounds before the last, whose GPUs the preemptor did not start "
            "on): job 24 (P1) 1 at 0 s, 1 at 1.5 s." in R._run_section(run, R.compute_kpis(run), []))


def test_the_spread_of_guaranteed_work_at_whole_node_submissions(tmp_path):
    # Nodes of 4 GPUs here.  Two 1-GPU guaranteed jobs run on gpu1 and gpu2
    # when the 4-GPU P0 job 23 is submitted (1095): 2 nodes hold guaranteed
    # work where 1 would do packed.  When the 4-GPU P1 job 24 is submitted
    # (1200), 21 has ended and 23 holds gpu3 whole: gpu2 and gpu3, packed
    # 1 + 1.  The P3 job 25 on gpu4 holds nothing guaranteed.
    jobs = [("w1", 21, "P1", 1, 1000, 1000, 1010, 1110, "COMPLETED", 0),
            ("w2", 22, "P0", 1, 1000, 1000, 1020, 1360, "CANCELLED", 0),
            ("w3", 23, "P0", 4, 1095, 1095, 1100, 1360, "CANCELLED", 0),
            ("w4", 24, "P1", 4, 1200, 1200, "", 1360, "CANCELLED", 0),
            ("w5", 25, "P3", 2, 1000, 1000, 1005, 1360, "CANCELLED", 0)]
    bills = [(21, 0, "P1", 1010, 1110, "COMPLETED", 1, 10, ""),
             (22, 0, "P0", 1020, 1360, "CANCELLED", 1, 10, ""),
             (23, 0, "P0", 1100, 1360, "CANCELLED", 4, 10, ""),
             (24, 0, "P1", 1360, 1360, "CANCELLED", 4, 0, "never ran"),
             (25, 0, "P3", 1005, 1360, "CANCELLED", 2, 10, "")]
    d = write_run(str(tmp_path / "planc-1"), jobs=jobs, bills=bills)
    run = R.Run(d)
    assert R.guaranteed_spread(run, 4) is None  # no log
    with open(os.path.join(d, "slurmctld.log"), "w") as f:
        f.write("[1970-01-01T00:16:40.000] _slurm_rpc_submit_batch_job: JobId=21 InitPrio=1 usec=1\n"
                "[1970-01-01T00:16:45.000] sched: Allocate JobId=25 NodeList=gpu4 #CPUs=2\n"
                "[1970-01-01T00:16:50.000] sched: Allocate JobId=21 NodeList=gpu1 #CPUs=1\n"
                "[1970-01-01T00:17:00.000] sched/backfill: _start_job: Started JobId=22 in "
                "guaranteed on gpu2\n"
                "[1970-01-01T00:18:20.000] sched: Allocate JobId=23 NodeList=gpu3 #CPUs=4\n"
                "[1970-01-01T00:18:30.000] _job_complete: JobId=21 done\n")
    run = R.Run(d)
    assert R.guaranteed_spread(run, 4) == {"submissions": 2, "holding_mean": 2.0,
                                           "packed_mean": 1.5}
