"""tools/replay/workload.py: readers on fixtures in the traces' documented
formats, the synthetic generator's promises, our CSV, compression."""
import csv
import io
import math
import os

import pytest

from tools.replay import workload as W

HERE = os.path.dirname(os.path.abspath(__file__))


def fixture(name):
    return os.path.join(HERE, name)


def test_alibaba_reader_maps_qos_times_and_fractions():
    dropped = W.Dropped()
    jobs = W.read_alibaba(fixture("alibaba_pods.csv"), dropped=dropped)
    got = [(j.name, j.submit, j.duration, j.gpus, j.cpus, j.mem_mib, j.tier, j.checkpoints)
           for j in jobs]
    assert got == [
        ("w000001", 0.0, 1000.0, 1.0, 12, 16384, "P1", False),   # LS, whole card
        ("w000002", 30.0, 100.0, 0.0, 3, 4096, "P2", True),     # Burstable, CPU-only, 2.5 -> 3 CPUs
        ("w000003", 60.0, 200.0, 0.46, 6, 12288, "P3", False),  # BE, 460 milli-GPU; run from scheduled
        ("w000004", 200.0, 5000.0, 8.0, 64, 131072, "P0", False),  # Guaranteed, 8 GPUs
    ]
    assert dropped.counts == {"never scheduled": 1, "no time run (deletion <= scheduled)": 1,
                              "qos 'Weird' not in the tier map": 1}


def test_alibaba_tier_map_is_a_parameter():
    jobs = W.read_alibaba(fixture("alibaba_pods.csv"),
                          tier_map={"LS": "P0", "BE": "P2", "Burstable": "P3", "Guaranteed": "P1",
                                    "Weird": "P3"})
    assert [j.tier for j in jobs] == ["P0", "P3", "P2", "P1", "P3"]
    assert [j.checkpoints for j in jobs] == [False, False, True, False, False]


def test_a_trace_without_the_columns_its_reader_needs_is_refused_by_name(tmp_path, capsys):
    # An Alibaba pod list without its time columns: refused, not read as a
    # workload of 0 jobs.
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos\np1,1000,1024,1,1000,LS\n")
    with pytest.raises(ValueError, match="missing columns creation_time, deletion_time, "
                                         "scheduled_time"):
        W.read_alibaba(str(pods))
    assert W.cli(["alibaba", str(pods), "-o", str(tmp_path / "w.csv")]) == 2
    assert "not an Alibaba pod list: missing columns creation_time" in capsys.readouterr().err
    assert not (tmp_path / "w.csv").exists()


def test_help_prints_the_sacct_command(capsys):
    with pytest.raises(SystemExit) as e:
        W.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "run: SLURM_TIME_FORMAT=%s sacct" in out and "option_strings" not in out


def test_alibaba_shared_trace_counts():
    path = "/work/shared/traces/alibaba-gpu-2023/openb_pod_list_default.csv"
    if not os.path.exists(path):
        pytest.skip("shared trace not here")
    dropped = W.Dropped()
    jobs = W.read_alibaba(path, dropped=dropped)
    # The traces README: 8,152 tasks; 897 never scheduled.
    assert len(jobs) + dropped.total() == 8152
    assert dropped.counts == {"never scheduled": 897}
    assert {j.tier for j in jobs} == set(W.TIERS)


def test_helios_reader():
    dropped = W.Dropped()
    jobs = W.read_helios(fixture("helios_cluster_log.csv"), seed=3, dropped=dropped)
    assert [(j.submit, j.duration, j.gpus, j.cpus) for j in jobs] == [
        (0.0, 36848.0, 1.0, 1), (26.0, 249.0, 4.0, 16), (27.0, 675233.0, 1.0, 1),
        (59.0, 3600.0, 16.0, 64), (119.0, 60.0, 0.0, 8)]
    assert dropped.counts == {"never started": 1}
    assert all(j.mem_mib == 0 for j in jobs)
    # Tiers are drawn from the mix with the seed: same seed, same tiers.
    again = W.read_helios(fixture("helios_cluster_log.csv"), seed=3)
    assert [j.tier for j in jobs] == [j.tier for j in again]
    only_p3 = W.read_helios(fixture("helios_cluster_log.csv"), tier_mix={"P3": 1.0})
    assert {j.tier for j in only_p3} == {"P3"}
    assert len(W.read_helios(fixture("helios_cluster_log.csv"), gpu_only=True)) == 4


def test_philly_reader():
    dropped = W.Dropped()
    jobs = W.read_philly(fixture("philly_cluster_job_log.json"), tier_mix={"P2": 1.0},
                         dropped=dropped)
    # Job 1: 8 GPUs, two attempts of 74 s and 2 d 5 h 39 min 42 s.
    assert [(j.submit, j.duration, j.gpus, j.tier, j.checkpoints) for j in jobs] == [
        (0.0, 74.0 + 193182.0, 8.0, "P2", True), (201.0, 600.0, 4.0, "P2", True)]
    assert dropped.counts == {"no attempts (never started)": 1,
                              "an attempt without start or end": 2}


def test_sacct_export_to_helios_then_read():
    dropped = W.Dropped()
    with open(fixture("sacct_output.txt")) as f:
        text = W.export_sacct_to_helios(f.read(), dropped=dropped)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == list(W.HELIOS_COLUMNS) + ["tier"]
    got = [(r["job_id"], r["gpu_num"], r["cpu_num"], r["node_num"], r["state"], r["submit_time"],
            r["duration"], r["queue"], r["tier"]) for r in rows]
    assert got == [
        ("101", "2", "8", "1", "COMPLETED", "2026-11-30 18:40:00", "100", "10", "P0"),
        ("102", "1", "4", "1", "CANCELLED", "2026-11-30 18:40:20", "30", "30", "P3"),
        # -D's two runs: the last one kept; typed and plain gres/gpu not added twice
        ("103", "16", "64", "2", "COMPLETED", "2026-11-30 18:45:40", "300", "60", "P2"),
    ]
    assert dropped.counts == {"line without exactly 9 fields": 1, "qos 'normal' not in the map": 1,
                              "never started": 1, "not ended": 1}
    helios = os.path.join(os.environ.get("TMPDIR", "/tmp"), "planc-replay-test-helios.csv")
    with open(helios, "w") as f:
        f.write(text)
    jobs = W.read_helios(helios)
    assert [(j.submit, j.duration, j.gpus, j.tier) for j in jobs] == [
        (0.0, 100.0, 2.0, "P0"), (20.0, 30.0, 1.0, "P3"), (340.0, 300.0, 16.0, "P2")]


def test_alloc_gpus():
    assert W._alloc_gpus("cpu=4,gres/gpu=2,mem=1G") == 2
    assert W._alloc_gpus("cpu=4,gres/gpu:h800=2,gres/gpu:a100=1") == 3
    assert W._alloc_gpus("cpu=4,mem=1G") == 0


def test_sacct_fields_hold_no_user_text():
    # A job name or comment could hold '|': they must never be exported.
    for field in ("JobName", "Comment", "AdminComment", "SystemComment", "WorkDir", "User"):
        assert field not in W.SACCT_FIELDS
        assert field not in W.SACCT_COMMAND
    assert "SLURM_TIME_FORMAT=%s" in W.SACCT_COMMAND and "-P" in W.SACCT_COMMAND


def test_lognormal_fit():
    for median, mean in W.LENGTH_STATS.values():
        mu, sigma = W.lognormal_params(median, mean)
        assert math.exp(mu) == pytest.approx(median)
        assert math.exp(mu + sigma ** 2 / 2) == pytest.approx(mean)
    mu, sigma = W.lognormal_params(206, 6652)
    assert sigma == pytest.approx(2.636, abs=1e-3)
    # A cap far above every draw leaves the mean; a tiny cap is the mean.
    assert W.capped_lognormal_mean(mu, sigma, 1e15) == pytest.approx(6652, rel=1e-6)
    assert W.capped_lognormal_mean(mu, sigma, 1e-3) == pytest.approx(1e-3, rel=1e-3)


def test_synthetic_is_seeded_and_keeps_its_promises():
    a = W.synthetic(seed=7, hours=24, gpus_total=512, load=0.9)
    b = W.synthetic(seed=7, hours=24, gpus_total=512, load=0.9)
    c = W.synthetic(seed=8, hours=24, gpus_total=512, load=0.9)
    assert a == b and a != c
    assert len(a) >= 2000
    assert all(0 <= j.submit < 24 * 3600 for j in a)
    assert [j.submit for j in a] == sorted(j.submit for j in a)
    assert {j.tier for j in a} == set(W.TIERS)
    assert all(j.checkpoints == (j.tier == "P2") for j in a)
    assert all(j.gpus in (1, 2, 4, 8, 16) for j in a)
    assert all(1 <= j.duration <= 24 * 3600 for j in a)
    d = W.describe(a, 512, 24 * 3600)
    # Expected load 0.9; one seeded day of a heavy-tailed workload lands near it.
    assert 0.6 < d["offered_load"] < 1.2
    # Trace jobs (not P0 leases) keep the published median (206 s) roughly.
    short = sorted(j.duration for j in a if j.tier != "P0")
    assert 150 < short[len(short) // 2] < 280
    # Shares per tier within a few points of the mix.
    for tier, share in W.DEFAULT_TIER_MIX.items():
        assert abs(d["per_tier"][tier] / len(a) - share) < 0.03


def test_synthetic_daily_cycle():
    jobs = W.synthetic(seed=1, hours=24, gpus_total=512, load=0.9)
    day = sum(1 for j in jobs if 10 * 3600 <= j.submit < 18 * 3600)
    night = sum(1 for j in jobs if j.submit < 4 * 3600 or j.submit >= 22 * 3600)
    assert day > 2 * night


def test_synthetic_n_jobs_and_options():
    jobs = W.synthetic(n_jobs=100, seed=1, hours=1, gpus_total=32, load=None,
                       gpu_mix=((1, 0.7), (2, 0.15), (4, 0.1), (8, 0.05)), max_length=1800,
                       fractional_share=0.5)
    assert len(jobs) == 100
    assert max(j.duration for j in jobs) <= 1800
    assert any(0 < j.gpus < 1 for j in jobs)
    assert all(j.gpus <= 8 for j in jobs)
    philly = W.synthetic(n_jobs=2000, seed=1, length_stats="philly", load=None,
                         tier_mix={"P3": 1.0}, max_length=1e9)
    med = sorted(j.duration for j in philly)[1000]
    assert 700 < med < 1050  # Philly's median 874 s
    with pytest.raises(ValueError):
        W.synthetic(n_jobs=10, load=0.9)
    with pytest.raises(ValueError):
        W.synthetic(load=0.9, tier_mix={"P9": 1.0})


def test_csv_round_trip_and_header(tmp_path):
    jobs = W.read_alibaba(fixture("alibaba_pods.csv"))
    path = str(tmp_path / "w.csv")
    W.write_csv(jobs, path)
    assert open(path).readline().strip() == ",".join(W.CSV_COLUMNS)
    assert W.read_csv(path) == jobs
    bad = tmp_path / "bad.csv"
    bad.write_text("name,submit\nw1,0\n")
    with pytest.raises(ValueError, match="header"):
        W.read_csv(str(bad))
    bad.write_text(",".join(W.CSV_COLUMNS) + "\nw1,0,10,1,4,0,P7,0\n")
    with pytest.raises(ValueError, match="bad job row"):
        W.read_csv(str(bad))


def test_compress_and_clocks():
    jobs = W.read_alibaba(fixture("alibaba_pods.csv"))
    fast = W.compress(jobs, 10)
    assert [(j.submit, j.duration) for j in fast] == [(0.0, 100.0), (3.0, 10.0), (6.0, 20.0),
                                                      (20.0, 500.0)]
    assert [j.gpus for j in fast] == [j.gpus for j in jobs]
    assert W.clocks(1) == {"StarvationThreshold": 1800, "StarvationInterval": 60,
                           "PreemptWindow": 86400, "P3PreemptWindow": 3600,
                           "SpotCapDayLength": 86400,
                           "P2GraceTime": 30, "SlaStartSeconds": 40}
    c = W.clocks(60)
    assert c["StarvationThreshold"] == 30 and c["PreemptWindow"] == 1440
    assert c["P3PreemptWindow"] == 60
    assert c["SpotCapDayLength"] == 1440 and c["StarvationInterval"] == 1
    assert c["P2GraceTime"] == 2          # the floor: 30/60 would be 0.5 s
    assert W.clocks(10)["P2GraceTime"] == 3
    assert W.clocks(12)["P2GraceTime"] == 3   # 2.5 rounds up, not to even
    assert c["SlaStartSeconds"] == 40     # a scheduler latency: not scaled
    with pytest.raises(ValueError):
        W.compress(jobs, 0)


def test_window_and_fit_to_nodes():
    jobs = W.read_alibaba(fixture("alibaba_pods.csv"))
    cut = W.window(jobs, 30, 1 / 60)  # trace seconds [30, 90)
    assert [(j.name, j.submit, j.tier) for j in cut] == [("w000001", 0.0, "P2"),
                                                          ("w000002", 30.0, "P3")]
    fitted, changed = W.fit_to_nodes(jobs, cpus=32, mem_mib=256000, gpus=8)
    # 1 GPU: at most 4 CPUs and 32000 MiB; 8 GPUs: a node's 32 CPUs; CPU-only: a node.
    assert [(j.cpus, j.mem_mib) for j in fitted] == [(4, 16384), (3, 4096), (2, 12288),
                                                     (32, 131072)]
    assert changed == 3


def test_cli_writes_the_reference_workload(tmp_path):
    out = str(tmp_path / "ref.csv")
    assert W.main(["synthetic", "--seed", "1", "--hours", "1", "--gpus", "32", "--jobs", "100",
                   "--max-length", "1800", "--gpu-mix", "1=0.7,2=0.15,4=0.1,8=0.05",
                   "-o", out]) == 0
    shipped = os.path.join(HERE, "..", "..", "workloads", "reference.csv")
    if os.path.exists(shipped):
        # workloads/README.md's command makes exactly the shipped file.
        assert open(out).read() == open(shipped).read()
    jobs = W.read_csv(out)
    assert len(jobs) == 100 and {j.tier for j in jobs} == set(W.TIERS)


def test_scale_arrivals_and_cap_lengths():
    jobs = W.read_alibaba(fixture("alibaba_pods.csv"))
    fast = W.scale_arrivals(jobs, 10)
    assert [(j.submit, j.duration) for j in fast] == [(0.0, 1000.0), (3.0, 100.0), (6.0, 200.0),
                                                      (20.0, 5000.0)]
    capped, n = W.cap_lengths(jobs, 500)
    assert [j.duration for j in capped] == [500.0, 100.0, 200.0, 500.0] and n == 2
    with pytest.raises(ValueError):
        W.scale_arrivals(jobs, 0)
