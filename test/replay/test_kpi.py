"""tools/replay/kpi.py: each of section 9's KPIs on small hand-built tables,
the censored and empty-hour cases among them."""
import pytest

from tools.replay import kpi

H = 3600.0


def seg(submitted, tier, hours, preempted):
    return {"submitted": submitted, "tier": tier, "length": hours * H, "preempted": preempted}


def test_kaplan_meier_without_censoring_is_the_plain_mean():
    curve = kpi.kaplan_meier([1, 2, 3], [True, True, True])
    assert curve == [(1, pytest.approx(2 / 3)), (2, pytest.approx(1 / 3)), (3, 0.0)]
    assert kpi.restricted_mean(curve, 10) == pytest.approx(2.0)


def test_kaplan_meier_a_censored_run_leaves_the_risk_set_without_an_event():
    # 1: interrupted; 2: completed (censored); 3: interrupted.
    curve = kpi.kaplan_meier([1, 2, 3], [True, False, True])
    assert curve == [(1, pytest.approx(2 / 3)), (3, 0.0)]
    assert kpi.restricted_mean(curve, 10) == pytest.approx(1 + 2 / 3 * 2)
    # The horizon cuts the curve: at most the horizon.
    assert kpi.restricted_mean(curve, 2) == pytest.approx(1 + 2 / 3 * 1)
    # A tie: the event comes first, the censored run was at risk at t.
    assert kpi.kaplan_meier([2, 2], [False, True]) == [(2, pytest.approx(0.5))]


def test_p2_run_before_interruption_counts_censored_runs_and_leaves_free_attempts_to_p3():
    segments = [seg("P2", "P2", 5, True), seg("P2", "P2", 3, False), seg("P2", "P2", 1, True),
                seg("P3", "P2", 0.5, True),   # a free attempt: P3's
                seg("P3", "P3", 9, False)]
    k = kpi.p2_interruption(segments)
    assert (k["segments"], k["preemptions"], k["censored"]) == (3, 2, 1)
    assert k["run_hours"] == pytest.approx(9)
    assert k["run_hours_per_preemption"] == pytest.approx(4.5)
    assert k["plain_mean_h"] == pytest.approx(3.0)
    # KM: 1 h (event, 3 at risk) -> 2/3; 3 h censored; 5 h (event, 1 at risk) -> 0.
    assert k["km_restricted_mean_h"] == pytest.approx(1 + 2 / 3 * 4)
    assert k["run_hours_lower_bound"] is None


def test_p2_never_interrupted_has_a_lower_bound_not_a_mean():
    # Cut by the window at 24 h and jobs that finished in minutes: nothing
    # was interrupted, so the plain mean (the old reading) says little.
    k = kpi.p2_interruption([seg("P2", "P2", 24, False), seg("P2", "P2", 0.1, False)])
    assert k["run_hours_per_preemption"] is None
    assert k["run_hours_lower_bound"] == pytest.approx(24.1)
    assert k["km_restricted_mean_h"] == pytest.approx(24.0)  # S stays 1 up to the longest run
    assert k["plain_mean_h"] == pytest.approx(12.05)
    assert kpi.p2_interruption([])["km_restricted_mean_h"] is None
    k = kpi.p2_interruption([seg("P2", "P2", 30, False), seg("P2", "P2", 2, True)])
    assert k["km_restricted_mean_h"] == pytest.approx(2 + 0.5 * 22)  # horizon 24 h


def job(jid, tier, eligible, first_start=None):
    return {"job_id": jid, "tier": tier, "eligible": eligible, "first_start": first_start}


def run(jid, start, end, preempted):
    return {"job_id": jid, "start": start, "end": end, "preempted": preempted}


def test_p3_rate_is_by_submitted_tier_and_empty_hours_are_shown():
    jobs = [job("a", "P3", 0, 100), job("b", "P3", 0, 200), job("c", "P2", 0, 0),
            job("d", "P3", 0, None),      # never started
            job("e", "P3", 2 * H + 10, None)]
    segments = [run("a", 100, 1000, True),         # P3, preempted in hour 0
                run("a", 1500, 2500, False),       # its free attempt (ran as P2): still P3's
                run("b", 200, 1.5 * H, False),     # runs into hour 1 and completes there
                run("c", 0, 3 * H, True)]          # P2's: not counted
    k = kpi.p3_rate_by_hour(jobs, segments, 0, 3 * H)
    h0, h1, h2 = k["hours"]
    assert (h0["preempted"], h0["ran"], h0["rate"]) == (1, 3, pytest.approx(1 / 3))
    assert (h1["preempted"], h1["ran"], h1["rate"]) == (0, 1, 0.0)
    # Hour 2: no P3 run at all: no rate, and who waited is shown.
    assert h2["rate"] is None and h2["ran"] == 0 and h2["waiting"] == 2
    assert k["empty_hours"] == 1 and k["never_started"] == 2 and k["jobs"] == 4
    assert k["mean"] == pytest.approx(1 / 6) and k["worst"] == pytest.approx(1 / 3)
    # No hour has MIN_P3_RUNS runs: no busy worst; pooled 1 of 4 hourly runs.
    assert k["worst_busy"] is None and k["busy_hours"] == 0
    assert k["pooled"] == pytest.approx(1 / 4)


def test_p3_worst_busy_hour_leaves_out_hours_of_a_run_or_two():
    # Hour 0: one run, preempted (100%).  Hour 1: ten runs, two preempted.
    jobs = [job(f"j{i}", "P3", 0, H + 1) for i in range(10)] + [job("x", "P3", 0, 10)]
    segments = [run("x", 10, 20, True)] + [
        run(f"j{i}", H + 1, H + 100, i < 2) for i in range(10)]
    k = kpi.p3_rate_by_hour(jobs, segments, 0, 2 * H)
    assert [h["ran"] for h in k["hours"]] == [1, 10]
    assert k["worst"] == 1.0
    assert k["worst_busy"] == pytest.approx(0.2) and k["busy_hours"] == 1
    assert k["pooled"] == pytest.approx(3 / 11)


def test_preemptions_in_any_24_h():
    at = {"x": [0, 10 * H, 20 * H, 30 * H], "y": [0]}
    assert kpi.preemptions_24h(at, ["x", "y", "z"]) == [3, 1, 0]


def test_utilisation_shows_replicas_apart_and_goodput_without_preempted_runs():
    segments = [{"start": 0, "end": 10, "gpus": 2, "preempted": False},
                {"start": 5, "end": 15, "gpus": 1, "preempted": True}]   # cut at 10
    replicas = [{"start": 0, "end": 10, "gpus": 1}]
    u = kpi.utilisation(segments, replicas, 4, 0, 10)
    assert u["workload"] == pytest.approx(25 / 40)
    assert u["replicas"] == pytest.approx(10 / 40)
    assert u["allocated"] == pytest.approx(35 / 40)
    assert u["goodput"] == pytest.approx(20 / 40)
    assert u["preempted"] == pytest.approx(5 / 40)


def test_the_greedy_ceiling_lets_a_job_that_fits_pass_one_that_does_not():
    w = [{"submit": 0, "duration": 4, "gpus": 1}, {"submit": 0, "duration": 4, "gpus": 2},
         {"submit": 0, "duration": 4, "gpus": 1}]
    # 0-4: both 1-GPU jobs; 4-8: the 2-GPU job; 8-10: idle.
    assert kpi.greedy_ceiling(w, 2, 0, 10) == pytest.approx(16 / 20)
    # A window that starts empty and ends before long jobs do.
    w = [{"submit": 5, "duration": 100, "gpus": 2}]
    assert kpi.greedy_ceiling(w, 2, 0, 10) == pytest.approx(10 / 20)
    # Larger than the pool: never runs.
    assert kpi.greedy_ceiling([{"submit": 0, "duration": 5, "gpus": 3}], 2, 0, 10) == 0.0


def test_the_greedy_ceiling_keeps_submission_order_among_jobs_that_fit():
    w = [{"submit": 0, "duration": 10, "gpus": 1}, {"submit": 1, "duration": 2, "gpus": 1},
         {"submit": 2, "duration": 2, "gpus": 1}]
    # 1 GPU: the first runs 0-10; at 10 the second (submitted first) runs
    # 10-12, then the third 12-14: all within [0, 20].
    assert kpi.greedy_ceiling(w, 1, 0, 20) == pytest.approx(14 / 20)
    assert kpi.greedy_ceiling(w, 1, 0, 11) == pytest.approx(11 / 11)


def test_the_ceiling_on_the_same_nodes_never_splits_a_job_a_node_could_hold():
    # Two nodes of 8: three 5-GPU jobs fit the pool of 16 at once, the
    # nodes only two at a time.
    w = [{"submit": 0, "duration": 10, "gpus": 5}] * 3
    assert kpi.greedy_ceiling(w, 16, 0, 10) == pytest.approx(15 / 16)
    assert kpi.greedy_ceiling(w, 16, 0, 10, gpus_per_node=8) == pytest.approx(10 / 16)
    # Best fit: the 3-GPU job goes beside the 5-GPU one, so the 8-GPU job
    # that follows finds a whole node.
    w = [{"submit": 0, "duration": 10, "gpus": 5}, {"submit": 1, "duration": 10, "gpus": 3},
         {"submit": 2, "duration": 10, "gpus": 8}]
    assert kpi.greedy_ceiling(w, 16, 0, 10, gpus_per_node=8) == pytest.approx(
        (5 * 10 + 3 * 9 + 8 * 8) / 160)
    # 16 GPUs take two whole nodes: one GPU busy on each node holds it back
    # until one of them ends.
    w = [{"submit": 0, "duration": 4, "gpus": 1}, {"submit": 0, "duration": 4, "gpus": 7},
         {"submit": 0, "duration": 6, "gpus": 1}, {"submit": 1, "duration": 10, "gpus": 16}]
    # 0-4: 1+7 on one node, 1 on the other; the 16-GPU job waits for both
    # nodes to be empty (6) and runs 6-16; [0, 10] holds 8*4 + 6 + 16*4.
    assert kpi.greedy_ceiling(w, 16, 0, 10, gpus_per_node=8) == pytest.approx(
        (8 * 4 + 6 + 16 * 4) / 160)


def test_start_lateness_is_from_the_later_of_eligibility_and_the_last_end_on_its_nodes():
    def start(t, nodes, eligible, gpus, by):
        return {"kind": "start", "time": t, "nodes": nodes, "eligible": eligible, "gpus": gpus,
                "by": by}
    events = [
        start(0, ["a"], 0, 8, "main"),                # starts at once: 0
        start(1, ["b"], 1, 4, "main"),
        {"kind": "free", "time": 10, "nodes": ["a"]},  # a's job ends at 10
        start(13, ["a"], 5, 2, "backfill"),           # could at 10 (eligible 5): 3 s
        start(14, ["a"], 12, 1, "backfill"),          # eligible at 12: 2 s
        {"kind": "free", "time": 20, "nodes": ["b"]},
        start(21, ["a", "b"], 0, 16, "main"),         # b freed last, at 20: 1 s
        start(22, ["b"], None, 1, "main"),            # eligibility unknown: not judged
        start(99, ["b"], 0, 1, "main"),               # after the window
    ]
    k = kpi.start_lateness(events, 0, 50)
    assert k["by"]["main"] == {"starts": 3, "mean_s": pytest.approx(1 / 3), "max_s": 1.0}
    assert k["by"]["backfill"] == {"starts": 2, "mean_s": pytest.approx(2.5), "max_s": 3.0}
    assert k["gpu_seconds"] == pytest.approx(3 * 2 + 2 * 1 + 1 * 16)
    # A window that starts later judges only the starts inside it.
    assert kpi.start_lateness(events, 12, 50)["gpu_seconds"] == pytest.approx(3 * 2 + 2 + 16)
    assert kpi.start_lateness([], 0, 1) == {"by": {}, "gpu_seconds": 0.0}


def g(tier, eligible, first_start=None, held="", refused=False):
    return {"tier": tier, "eligible": eligible, "first_start": first_start, "held_reason": held,
            "refused": refused}


def test_the_sla_counts_every_guaranteed_submission():
    jobs = [g("P0", 0, 10), g("P0", 0, 50),               # met, late
            g("P0", 0, None),                             # never started: missed
            g("P0", 0, refused=True),                     # refused by Slurm: missed
            g("P0", 0, None, held="dependency"),          # its own limit: left out
            g("P0", 990, None),                           # the window's last 40 s: no verdict
            g("P1", 0, 1)]
    k = kpi.sla(jobs, "P0", 40, 1000)
    assert (k["met"], k["missed"], k["held_back"], k["no_verdict"]) == (1, 3, 1, 1)
    assert k["attainment"] == pytest.approx(1 / 4)
    assert kpi.sla(jobs, "P1", 40, 1000)["attainment"] == 1.0
    assert kpi.sla([], "P0", 40, 1000)["attainment"] is None


def test_operations_per_hour_against_the_flapping_alert():
    times = [10, 20, 30, 40, 50, 60, 70, H + 1, 3 * H - 1]
    k = kpi.ops_per_hour(times, 0, 3 * H)
    assert k["per_hour"] == [7, 1, 1] and k["max"] == 7 and k["hours_over_alert"] == 1
    assert k["mean"] == pytest.approx(3.0)
