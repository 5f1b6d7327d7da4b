"""job_submit/planc on the private cluster, as users see it.

Accounts (set up by planc-cluster from planc.conf):
  acct-lease     p0-lease, p2-spot, p3-spot   DefaultQOS p0-lease
  acct-api       p1-guaranteed, p3-spot       DefaultQOS p1-guaranteed
  acct-spot      p2-spot, p3-spot             DefaultQOS p3-spot
  acct-nodefault p2-spot, p3-spot             no DefaultQOS
Users: pcalice (acct-lease, acct-spot), pcbob (acct-spot),
       pccarol (acct-api, acct-nodefault).
"""
import pytest

SLEEP = ["--wrap", "sleep 2"]


@pytest.mark.parametrize("typed", ["plan-a-spot", "p2", "P2", "elastic", "p2-spot"])
def test_tier_alias_runs_under_canonical_qos(cluster, typed):
    jobid, p = cluster.sbatch("-A", "acct-spot", f"--qos={typed}", "--gres=gpu:1", *SLEEP,
                              user="pcbob")
    assert jobid, p.stderr
    # What squeue shows while it waits or runs, and what accounting keeps.
    assert cluster.squeue_field(jobid, "%q") == "p2-spot"
    cluster.wait_for("job to finish", lambda: cluster.sacct_field(jobid, "State") == "COMPLETED",
                     timeout=90)
    # slurmdbd may answer "Unknown" for a moment while it files the end
    # record; what it keeps is the canonical QoS.
    cluster.wait_for("sacct QOS", lambda: cluster.sacct_field(jobid, "QOS") == "p2-spot",
                     timeout=30)


@pytest.mark.parametrize("user,account,expected", [
    ("pcalice", "acct-lease", "p0-lease"),      # association DefaultQOS
    ("pccarol", "acct-api", "p1-guaranteed"),   # association DefaultQOS
    ("pcbob", "acct-spot", "p3-spot"),          # association DefaultQOS
    ("pccarol", "acct-nodefault", "p3-spot"),   # none: planc.conf DefaultTier=P3
])
def test_no_qos_gets_account_default(cluster, user, account, expected):
    jobid, p = cluster.sbatch("-A", account, "--hold", *SLEEP, user=user)
    assert jobid, p.stderr
    assert cluster.squeue_field(jobid, "%q") == expected
    cluster.run("scancel", jobid, check=True)


def test_unknown_tier_is_refused_with_valid_names(cluster):
    jobid, p = cluster.sbatch("-A", "acct-spot", "--qos=gold", *SLEEP, user="pcbob")
    assert jobid is None
    assert ("sbatch: error: unknown tier 'gold' in --qos. Valid tiers: "
            "p0-lease (p0, plan-a-lease, lease); p1-guaranteed (p1, plan-b-guaranteed, "
            "guaranteed); p2-spot (p2, plan-a-spot, elastic); p3-spot (p3, plan-b-spot, batch)"
            ) in p.stderr
    assert "Invalid qos specification" in p.stderr


def test_unentitled_tier_is_refused_naming_usable_tiers(cluster):
    jobid, p = cluster.sbatch("-A", "acct-spot", "--qos=plan-a-lease", *SLEEP, user="pcbob")
    assert jobid is None
    assert ("sbatch: error: tier P0 (p0-lease, Plan A long-term lease) is not available to "
            "account acct-spot. account acct-spot may use: p2-spot (P2), p3-spot (P3). Submit "
            "with --qos=<one of those>, or ask your account coordinator for access.") in p.stderr


def test_default_account_is_used_for_entitlement(cluster):
    # pcbob's default account is acct-spot: no -A, asking for P1.
    jobid, p = cluster.sbatch("--qos=p1", *SLEEP, user="pcbob")
    assert jobid is None
    assert "not available to account acct-spot" in p.stderr


@pytest.mark.parametrize("args,requeue", [
    (["--qos=p2"], "1"),
    (["--qos=p3"], "1"),
    (["--qos=p2", "--no-requeue"], "0"),
    (["--qos=p3", "--no-requeue"], "0"),
])
def test_preemptible_tiers_are_requeueable_unless_user_says_no(cluster, args, requeue):
    jobid, p = cluster.sbatch("-A", "acct-spot", "--hold", *args, *SLEEP, user="pcbob")
    assert jobid, p.stderr
    assert cluster.show_job(jobid)["Requeue"] == requeue
    cluster.run("scancel", jobid, check=True)


def test_scontrol_update_into_unentitled_tier_fails(cluster):
    jobid, p = cluster.sbatch("-A", "acct-spot", "--qos=p3", "--hold", *SLEEP, user="pcbob")
    assert jobid, p.stderr
    u = cluster.run("scontrol", "update", f"jobid={jobid}", "qos=p0", user="pcbob")
    assert u.returncode != 0
    assert "Invalid qos specification" in u.stderr
    assert cluster.squeue_field(jobid, "%q") == "p3-spot"
    # The refusal and its reason are in slurmctld's log for the admin.
    # An alias into an entitled tier is mapped like at submit time.
    u = cluster.run("scontrol", "update", f"jobid={jobid}", "qos=plan-a-spot", user="pcbob")
    assert u.returncode == 0, u.stderr
    assert cluster.squeue_field(jobid, "%q") == "p2-spot"
    # An unknown tier is refused for everyone.
    u = cluster.run("scontrol", "update", f"jobid={jobid}", "qos=gold")
    assert u.returncode != 0
    assert cluster.squeue_field(jobid, "%q") == "p2-spot"
    # Slurm's own admin rights still apply: root may move it anywhere.
    u = cluster.run("scontrol", "update", f"jobid={jobid}", "qos=lease")
    assert u.returncode == 0, u.stderr
    assert cluster.squeue_field(jobid, "%q") == "p0-lease"
    cluster.run("scancel", jobid, check=True)
