"""The measured-usage track on the private cluster (issue 13, item 5).

Bills are priced on what a run was allocated; `planc-bill measure` fills,
from slurmdbd's step records (JobAcctGatherType=jobacct_gather/linux on
the private cluster), what it actually used, and `planc-bill report
--efficiency` sets the two side by side.  Not measured is NULL, never 0.
"""
import json
import os
import subprocess
import time

import pytest

from conftest import ROOT

BILL_TOOL = os.path.join(ROOT, "planc-bill")
BUSY = """#!/bin/bash
# Burns one core for 5 s.
end=$((SECONDS + 5))
while [ $SECONDS -lt $end ]; do :; done
"""


def psql(c, sql):
    p = subprocess.run(["psql", "-X", "-q", "-t", "-A", "-F", "|", "-v", "ON_ERROR_STOP=1",
                        "-U", "postgres", "-d", "planc"], input=sql, capture_output=True,
                       text=True, env=c.env, timeout=60)
    assert p.returncode == 0, p.stderr
    return [l.split("|") for l in p.stdout.splitlines() if l]


def bill_tool(c, *args, user=None, writer=False):
    db = f"host={c.env['PGHOST']} port={c.env['PGPORT']} dbname=planc"
    if writer:  # as slurmctld's writer role, which measure needs (root maps to it)
        db += " user=planc_slurmctld"
    env = {k: v for k, v in c.env.items() if k != "PGUSER"}
    return c.run(BILL_TOOL, "--db", db, *args, user=user, env=env)


def usage(c, jobid):
    rows = psql(c, "SELECT billable_seconds, core_seconds, measured_at IS NOT NULL,"
                   " used_cpu_seconds, max_rss_bytes, coalesce(tres_usage_in_tot, '<NULL>'),"
                   " gpu_util_percent IS NULL FROM planc.bill WHERE job_id = " + str(int(jobid)))
    if not rows:
        return None
    (b,) = rows
    return {"seconds": int(b[0]), "core_seconds": int(b[1]), "measured": b[2] == "t",
            "used_cpu": None if b[3] == "" else float(b[3]),
            "max_rss": None if b[4] == "" else int(b[4]), "tres": b[5], "gpu_null": b[6] == "t"}


@pytest.fixture
def c(cluster):
    cluster.cancel_all()
    yield cluster
    cluster.cancel_all()


def test_measure_fills_used_cpu_and_peak_memory_and_report_shows_efficiency(c):
    # -S t0 takes bills that end at or after t0: t0 is the next whole
    # second after the fixture's cancel_all, so no earlier module's job
    # (cancelled there, in the same accounts) ends in the window; this
    # test's jobs are submitted once the clock has passed it.
    t0 = int(time.time()) + 1
    c.wait_for("the clock to pass the window's start", lambda: time.time() >= t0, timeout=5,
               interval=0.1)
    idle, p = c.sbatch("-A", "acct-nodefault", "--qos=p3-spot", "-c", "4", "--wrap", "sleep 6",
                       user="pccarol")
    assert idle, p.stderr
    busy, p = c.sbatch("-A", "acct-nodefault", "--qos=p3-spot", "-c", "1",
                       c.write_script("busy.sh", BUSY), user="pccarol")
    assert busy, p.stderr
    for j in (idle, busy):
        c.wait_for(f"job {j}'s bill", lambda: usage(c, j), timeout=120)
    # jobcomp wrote the bills when the runs ended: nothing measured yet.
    for j in (idle, busy):
        u = usage(c, j)
        assert (u["measured"], u["used_cpu"], u["max_rss"], u["tres"]) == \
            (False, None, None, "<NULL>"), u

    # A bill slurmdbd has no run for (as while slurmdbd lags behind): it
    # stays NULL, not 0.
    psql(c, "CREATE TEMP TABLE t AS SELECT * FROM planc.bill WHERE job_id = %d;"
            " UPDATE t SET job_id = 990313, note = 'test: no such run in slurmdbd';"
            " INSERT INTO planc.bill SELECT * FROM t;" % int(idle))
    try:
        check_measure(c, t0, idle, busy)
    finally:
        psql(c, "DELETE FROM planc.bill WHERE job_id = 990313")


def check_measure(c, t0, idle, busy):
    def measured():
        r = bill_tool(c, "measure", "-S", str(t0), writer=True)
        assert r.returncode == 0, r.stdout + r.stderr
        print(r.stdout)
        return all(usage(c, j)["measured"] for j in (idle, busy)) and r
    r = c.wait_for("measure to measure both runs", measured, timeout=120, interval=1)
    assert "without an ended run in slurmdbd" in r.stdout
    ghost = usage(c, 990313)
    assert (ghost["measured"], ghost["used_cpu"], ghost["max_rss"], ghost["tres"]) == \
        (False, None, None, "<NULL>"), ghost

    i, b = usage(c, idle), usage(c, busy)
    print("sleep, 4 CPUs:", i)
    print("busy loop, 1 CPU:", b)
    # sleep on 4 CPUs: used core-seconds well under allocated.
    assert i["core_seconds"] == 4 * i["seconds"] and i["seconds"] >= 5
    assert i["used_cpu"] is not None and i["used_cpu"] < 0.05 * i["core_seconds"], i
    # The busy loop used about its elapsed time on its one core (the
    # shared 2-core machine may lend it less).
    assert b["core_seconds"] == b["seconds"] and b["seconds"] >= 4
    assert 0.6 * b["seconds"] <= b["used_cpu"] <= b["seconds"] + 2, b
    for u in (i, b):
        assert u["max_rss"] and 100_000 < u["max_rss"] < 1 << 30, u  # bytes, a shell's size
        assert "cpu=" in u["tres"] and "mem=" in u["tres"], u
        assert u["gpu_null"], "no NVML in Debian's 22.05: GPU utilisation stays NULL"

    # Running it again changes nothing: each bill is measured once.
    before = psql(c, "SELECT job_id, measured_at, used_cpu_seconds FROM planc.bill"
                     " WHERE job_id IN (%d, %d) ORDER BY 1" % (int(idle), int(busy)))
    again = bill_tool(c, "measure", "-S", str(t0), writer=True)
    assert again.returncode == 0 and " 0 measured now" in again.stdout, again.stdout
    assert psql(c, "SELECT job_id, measured_at, used_cpu_seconds FROM planc.bill"
                   " WHERE job_id IN (%d, %d) ORDER BY 1" % (int(idle), int(busy))) == before

    # The owner's efficiency report: their own bills only (row-level security).
    out = bill_tool(c, "report", "--efficiency", "-S", str(t0), "-u", "pccarol",
                    "--json", user="pccarol")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    table = bill_tool(c, "report", "--efficiency", "-S", str(t0), user="pccarol")
    print("planc-bill report --efficiency -S %d (as pccarol):\n%s" % (t0, table.stdout))
    # Only pccarol's own bills (row-level security).  The cluster is the
    # session's: a pccarol job of an earlier module cancelled at its
    # teardown may end after t0, in another account; this test's bills are
    # the acct-nodefault row.
    assert {r["User"] for r in rows} == {"pccarol"}, rows
    (row,) = [r for r in rows if r["Account"] == "acct-nodefault"]
    # The bill slurmdbd has no run for counts as a bill, not as usage: the
    # ratios cover the measured ones only.
    assert (row["Bills"], row["Measured"]) == (3, 2)
    alloc_h = (i["core_seconds"] + b["core_seconds"]) / 3600
    used_h = (i["used_cpu"] + b["used_cpu"]) / 3600
    assert row["AllocCoreHours"] == pytest.approx(alloc_h, abs=2e-6)
    assert row["UsedCoreHours"] == pytest.approx(used_h, abs=2e-6)
    assert row["CPUPercent"] == pytest.approx(100 * used_h / alloc_h, abs=0.1)
    assert row["CPUPercent"] < 50
    assert 0 < row["PeakMemGiBHours"] < row["AllocMemGiBHours"]
    # pcbob sees nothing of pccarol's.
    other = bill_tool(c, "report", "--efficiency", "-S", str(t0), "--json",
                      user="pcbob")
    assert other.returncode == 0, other.stderr
    assert all(r["User"] == "pcbob" for r in json.loads(other.stdout))
