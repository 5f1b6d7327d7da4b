"""What happens during a P2 victim's 30 s grace, as its owner sees it.

The grace exists so a training job can checkpoint and exit.  Whatever the
victim does in its grace (exits 0 after a checkpoint, exits 143, dies of
SIGKILL, is cancelled by its owner, exits with GraceFinishedExitCode to say
its work is done), and whatever happens to the preemptor (cancelled) or to
slurmctld (restarted), the user sees one consistent story in squeue,
sacct, the note and the bill.

Each test pins one 8-GPU P2 victim and its 8-GPU P0 preemptor to gpu1, so
exactly that job is preempted.
"""
import datetime
import os
import re
import time

import pytest

from test_billing import psql
# `c`: the cluster emptied before and after each test, with stubborn.sh.
from test_preempt import c, events, first, running, submit_to_start  # noqa: F401

# A checkpointing job: on SIGTERM it records the signal, "saves" for 2 s
# and then does ACTION.  A second run (after a requeue) just runs.
CHECKPOINTING = """#!/bin/bash
f={work}/sig.$SLURM_JOB_ID
echo "start $(date +%s.%N) restarts=${{SLURM_RESTART_COUNT:-0}}" >> $f
trap 'echo "SIGTERM $(date +%s.%N)" >> '$f'; sleep 2; {action}' TERM
while true; do sleep 0.2; done
"""


def victim_and_preemptor(c, script, *victim_extra):
    victim, p = c.sbatch("-A", "acct-spot", "--qos=p2", "--gres=gpu:8", "-w", "gpu1",
                         *victim_extra, script, user="pcbob")
    assert victim, p.stderr
    c.wait_for("the P2 job to run", lambda: running(c, victim), timeout=60)
    p0, p = c.sbatch("-A", "acct-lease", "--qos=p0", "--gres=gpu:8", "-w", "gpu1", "--wrap",
                     "sleep 600", user="pcalice")
    assert p0, p.stderr
    c.wait_for("the victim's SIGTERM", lambda: first(c, victim, "SIGTERM"), timeout=30)
    return victim, p0


def note(c, jobid):
    return c.run("scontrol", "show", "job", jobid, user="pcbob").stdout


def sacct_runs(c, jobid):
    """(State, ExitCode, AdminComment) of each run, oldest first."""
    out = c.run("sacct", "-n", "-P", "-D", "-X", "-j", jobid, "-o",
                "Start,State,ExitCode,AdminComment", user="pcbob").stdout
    rows = [l.split("|", 3) for l in out.splitlines() if l.strip()]
    # sacct lists a requeued job's records in no fixed order: by start time,
    # the run still pending ("Unknown" start) last.
    rows.sort(key=lambda r: (not r[0][:1].isdigit(), r[0]))
    return [r[1:] for r in rows]


def bill_rows(c, jobid):
    return psql(c, "SELECT state, amount_minor, zero_reason FROM planc.bill WHERE job_id = :'p0'"
                   " ORDER BY start_time", jobid)


def wait_first_bill(c, jobid):
    return c.wait_for(f"the bill of job {jobid}'s run",
                      lambda: bill_rows(c, jobid) or None, timeout=60)[0]


@pytest.mark.parametrize("action,how", [("exit 0", "exit 0"), ("exit 143", "exit 143"),
                                        ("kill -9 $$", "signal 9")])
def test_victim_that_ends_in_its_grace_is_preempted_requeued_and_free(c, action, how):
    script = c.write_script(f"ckpt-{how.replace(' ', '')}.sh",
                            CHECKPOINTING.format(work=c.work, action=action))
    victim, p0 = victim_and_preemptor(c, script)
    c.wait_for("the P0 job to run", lambda: running(c, p0), timeout=60)
    # Requeued, as a preempted job is: it waits to run again.
    c.wait_for("the victim to be requeued", lambda: c.state(victim) == "PENDING", timeout=30)
    took = submit_to_start(c, p0)
    print(f"\n{how}: P0 running {took:.0f} s after its submission (by slurmctld)")
    assert took <= 40
    runs = c.wait_for("sacct's record of the first run",
                      lambda: (lambda r: r if r and r[0][0] != "RUNNING" else None)(
                          sacct_runs(c, victim)), timeout=30)
    state, _, comment = runs[0]
    assert state == "PREEMPTED", runs
    assert re.search(rf"by job {p0} \(P0 p0-lease\); SIGTERM sent, grace until \S+ \(30 s to "
                     rf"checkpoint\); ended on its own at \S+ during the grace \({how}\): treated "
                     r"as preempted, requeued \(auto-restart\); preemption 1 of at most 3 per "
                     r"24 h\. account acct-spot may use no guaranteed tier; ask your account "
                     r"coordinator for access to p0-lease \(P0\) or p1-guaranteed \(P1\)",
                     comment), comment
    # The run is billed free, as a preempted run.
    state, amount, reason = wait_first_bill(c, victim)
    assert (state, amount, reason) == (
        "PREEMPTED", "0", "preempted: unfinished preempted time is not billed")
    # And it runs again once there is room.
    c.end_now(p0)
    c.wait_for("the victim to run again",
               lambda: [k for k, _ in events(c, victim)].count("start") == 2, timeout=90)
    assert "restarts=1" in open(os.path.join(c.work, f"sig.{victim}")).read()
    assert len(bill_rows(c, victim)) == 1, "one bill for the preempted run, none twice"


def test_victim_that_finishes_with_the_documented_exit_code_stays_finished(c):
    script = c.write_script("ckpt-done.sh", CHECKPOINTING.format(work=c.work, action="exit 99"))
    victim, p0 = victim_and_preemptor(c, script)
    c.wait_for("the P0 job to run", lambda: running(c, p0), timeout=60)
    c.wait_for("the victim to be gone", lambda: c.state(victim) == "GONE", timeout=30)
    runs = c.wait_for("sacct's record", lambda: sacct_runs(c, victim) or None, timeout=30)
    assert len(runs) == 1, runs
    state, exit_code, comment = runs[0]
    assert (state, exit_code) == ("COMPLETED", "99:0"), runs
    assert re.search(r"finished at \S+ during the grace with exit 99 \(GraceFinishedExitCode\): "
                     r"completed and billed, not requeued", comment), comment
    state, amount, reason = wait_first_bill(c, victim)
    assert state == "COMPLETED" and int(amount) > 0 and reason == "", (state, amount, reason)


def test_victim_cancelled_by_its_owner_in_its_grace_is_not_requeued_nor_billed(c):
    victim, p0 = victim_and_preemptor(c, c.stubborn)
    c.run("scancel", victim, user="pcbob", check=True)
    c.wait_for("the P0 job to run", lambda: running(c, p0), timeout=60)
    c.wait_for("the victim to be gone", lambda: c.state(victim) == "GONE", timeout=30)
    runs = c.wait_for("sacct's record", lambda: sacct_runs(c, victim) or None, timeout=30)
    assert [r[0].split()[0] for r in runs] == ["CANCELLED"], runs  # "CANCELLED by <uid>"
    assert re.search(r"cancelled at \S+ during the grace by its owner: not requeued, this run is "
                     r"not billed", runs[0][2]), runs
    state, amount, reason = wait_first_bill(c, victim)
    assert (state, amount, reason) == (
        "CANCELLED", "0",
        "preempted: cancelled during its grace; unfinished preempted time is not billed")


def test_cancelled_preemptor_calls_the_preemption_off(c):
    victim, p0 = victim_and_preemptor(c, c.stubborn)
    sigterm = first(c, victim, "SIGTERM")
    deadline = sigterm + 30
    c.run("scancel", p0, user="pcalice", check=True)
    called_off = c.wait_for("the note to say the preemption is called off",
                            lambda: "called off" in note(c, victim) and note(c, victim),
                            timeout=10)
    print("\n" + re.search(r"SystemComment=.*", called_off).group(0))
    assert re.search(rf"planc: preemption at \S+ by job {p0} \(P0 p0-lease\) called off at \S+ "
                     rf"\(job {p0} was cancelled\); SIGTERM was sent at \S+; this job keeps "
                     r"running and the preemption is not counted \(0 of at most 3 per 24 h\)",
                     called_off), called_off
    # Slurm no longer counts down to a kill: no preemption time, the end
    # time from its time limit again.
    job = c.show_job(victim)
    assert job["PreemptTime"] == "None", job
    # Past the grace it would have had, it still runs, never killed.
    time.sleep(max(0.0, deadline + 3 - time.time()))
    assert c.state(victim) == "RUNNING"
    assert [k for k, _ in events(c, victim)].count("start") == 1
    # A later preemption is its first, not its second.
    p0b, p = c.sbatch("-A", "acct-lease", "--qos=p0", "--gres=gpu:8", "-w", "gpu1", "--wrap",
                      "sleep 600", user="pcalice")
    assert p0b, p.stderr
    c.wait_for("the second preemption's note",
               lambda: f"by job {p0b} (P0 p0-lease); SIGTERM" in note(c, victim), timeout=30)
    assert "preemption 1 of at most 3 per 24 h" in note(c, victim)


def test_held_preemptor_calls_the_preemption_off_and_preempts_again_once_released(c):
    """The owner holds the P0 job in its victim's grace: nothing can use the
    victim's GPUs, so it keeps its run.  Released, the P0 job preempts it
    again: a new grace, and still its first preemption."""
    victim, p0 = victim_and_preemptor(c, c.stubborn)
    c.run("scontrol", "hold", p0, user="pcalice", check=True)
    called_off = c.wait_for("the note to say the preemption is called off",
                            lambda: "called off" in note(c, victim) and note(c, victim),
                            timeout=10)
    assert re.search(rf"planc: preemption at \S+ by job {p0} \(P0 p0-lease\) called off at \S+ "
                     rf"\(job {p0} is held\); SIGTERM was sent at \S+; this job keeps "
                     r"running and the preemption is not counted \(0 of at most 3 per 24 h\)",
                     called_off), called_off
    assert c.show_job(victim)["PreemptTime"] == "None"
    assert c.state(p0) == "PENDING"
    c.run("scontrol", "release", p0, user="pcalice", check=True)
    c.wait_for("the second preemption's note",
               lambda: re.search(rf"by job {p0} \(P0 p0-lease\); SIGTERM sent",
                                 note(c, victim).split("called off")[-1]), timeout=30)
    assert "preemption 1 of at most 3 per 24 h" in note(c, victim)
    c.wait_for("the P0 job to run", lambda: running(c, p0), timeout=60)
    assert [k for k, _ in events(c, victim)].count("start") == 1, "one run, never restarted"


def test_holding_a_preempting_job_array_calls_the_preemption_off(c):
    """The preemptor is a P0 job array's pending task: `scontrol hold` of
    the array holds it like a single job, and the victim keeps its run;
    released, a task preempts again and runs."""
    victim, p = c.sbatch("-A", "acct-spot", "--qos=p2", "--gres=gpu:8", "-w", "gpu1", c.stubborn,
                         user="pcbob")
    assert victim, p.stderr
    c.wait_for("the P2 job to run", lambda: running(c, victim), timeout=60)
    array, p = c.sbatch("-A", "acct-lease", "--qos=p0", "--gres=gpu:8", "-w", "gpu1",
                        "--array=0-1", "--wrap", "sleep 600", user="pcalice")
    assert array, p.stderr
    c.wait_for("the victim's SIGTERM", lambda: first(c, victim, "SIGTERM"), timeout=30)
    c.run("scontrol", "hold", array, user="pcalice", check=True)
    called_off = c.wait_for("the note to say the preemption is called off",
                            lambda: "called off" in note(c, victim) and note(c, victim),
                            timeout=10)
    assert re.search(r"\(job \d+ is held\); SIGTERM was sent at \S+; this job keeps running and "
                     r"the preemption is not counted", called_off), called_off
    assert c.show_job(victim)["PreemptTime"] == "None"
    c.run("scontrol", "release", array, user="pcalice", check=True)
    c.wait_for("a task of the array to run",
               lambda: "RUNNING" in c.run("squeue", "-h", "-r", "-j", array, "-o", "%T").stdout,
               timeout=90)
    assert "preemption 1 of at most 3 per 24 h" in note(c, victim)


def test_a_preemptor_moved_to_p3_in_the_grace_calls_the_preemption_off(c):
    """The owner moves the waiting P0 job to P3 in its victim's grace (the
    account may use both): a P3 job may not preempt the P2 victim, so the
    victim keeps its run and the preemption is not counted."""
    victim, p0 = victim_and_preemptor(c, c.stubborn)
    p = c.run("scontrol", "update", f"jobid={p0}", "qos=p3", user="pcalice")
    assert p.returncode == 0, p.stderr
    called_off = c.wait_for("the note to say the preemption is called off",
                            lambda: "called off" in note(c, victim) and note(c, victim),
                            timeout=10)
    assert re.search(rf"called off at \S+ \(job {p0} is now P3, which does not preempt P2\); "
                     r"SIGTERM was sent at \S+; this job keeps running and the preemption is "
                     r"not counted", called_off), called_off
    assert c.show_job(victim)["PreemptTime"] == "None"
    c.scheduler_looked()
    assert running(c, victim) and c.state(p0) == "PENDING"
    assert c.squeue_field(p0, "%q") == "p3-spot"


def test_restart_during_the_grace_keeps_the_40_s(c):
    victim, p0 = victim_and_preemptor(c, c.stubborn)
    sigterm = first(c, victim, "SIGTERM")
    time.sleep(max(0.0, sigterm + 5 - time.time()))  # 5 s into the grace
    c.ctl("restart-ctld")
    c.wait_for("the P0 job to run", lambda: running(c, p0), timeout=90)
    took = submit_to_start(c, p0)
    print(f"\nrestart 5 s into the grace: P0 running {took:.0f} s after its submission "
          "(by slurmctld)")
    assert took <= 40, c.show_job(p0)
    # The grace was still honoured, and the note tells the end.
    assert time.time() - sigterm >= 30 - 1
    c.wait_for("the victim to be requeued", lambda: c.state(victim) == "PENDING", timeout=30)
    log = open(os.path.join(c.dir, "log", "slurmctld.log"), errors="replace").read()
    assert "1 in their grace, from" in log
    runs = c.wait_for("sacct's PREEMPTED record",
                      lambda: (lambda r: r if r and r[0][0] == "PREEMPTED" else None)(
                          sacct_runs(c, victim)), timeout=30)
    assert "(30 s to checkpoint); requeued (auto-restart); preemption 1 of" in runs[0][2], runs
