"""A broken planc.conf, as the admin meets it: slurmctld's log names
file, line and key, and slurmctld does not run with a half-loaded policy."""
import os
import shutil


def test_broken_planc_conf_is_logged_with_file_line_key(cluster):
    conf = os.path.join(cluster.dir, "etc", "planc.conf")
    log = os.path.join(cluster.dir, "log", "slurmctld.log")
    saved = conf + ".saved"
    shutil.copy(conf, saved)
    try:
        # A typo an admin might make, in the file the cluster runs with.
        with open(conf) as f:
            lines = f.read().splitlines()
        bad_line = next(i for i, l in enumerate(lines, 1) if l.startswith("GuaranteedCapPercent="))
        lines[bad_line - 1] = "GuaranteedCapPercent=eighty"
        with open(conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        log_size = os.path.getsize(log) if os.path.exists(log) else 0
        r = cluster.ctl("restart-ctld", check=False, timeout=120)
        assert r.returncode != 0, "slurmctld started with a broken planc.conf"
        with open(log, errors="replace") as f:
            f.seek(log_size)
            new_log = f.read()
        # Whichever Plan C plugin slurmctld loads first reports it.
        expected = (f"/planc: {conf}:{bad_line}: key 'GuaranteedCapPercent': "
                    "'eighty' is not a whole number (expected 1 to 100)")
        lines = [l for l in new_log.splitlines() if expected in l]
        assert lines, new_log[-3000:]
        assert any(f"error: {p}{expected}" in l for l in lines for p in ("job_submit", "preempt"))
    finally:
        shutil.move(saved, conf)
        r = cluster.ctl("restart-ctld", check=False, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    # The cluster takes jobs again with the good file.
    jobid, p = cluster.sbatch("-A", "acct-spot", "--qos=p3", "--hold", "--wrap", "true",
                              user="pcbob")
    assert jobid, p.stderr
    cluster.run("scancel", jobid, check=True)


def test_departure_from_the_policy_is_accepted_with_a_warning(cluster):
    """An admin may make P0 preemptible and let P1 preempt it; planc-conf
    and every plugin accept it and say which invariant it breaks."""
    from conftest import ROOT
    conf = os.path.join(cluster.dir, "etc", "planc.conf")
    log = os.path.join(cluster.dir, "log", "slurmctld.log")
    lines = ["Tier=P0 QOS=p0-lease Aliases=p0,plan-a-lease,lease Priority=10000 Preemptible=yes "
             "Preempts=P2,P3 GraceTime=0 PriceFactor=1.0",
             "Tier=P1 QOS=p1-guaranteed Aliases=p1,plan-b-guaranteed,guaranteed Priority=10000 "
             "Preemptible=no Preempts=P0,P2,P3 GraceTime=0 PriceFactor=1.0"]
    never = "breaks the policy's invariant \"P0 and P1 are never preempted\""
    try:
        log_size = os.path.getsize(log)
        cluster.set_planc_conf(lines)  # restarts slurmctld: it must come up
        check = cluster.run(os.path.join(ROOT, "planc-conf"), "check", conf)
        assert check.returncode == 0, check.stderr
        assert (f"planc-conf: warning: {conf}: P0 (p0-lease) is preemptible "
                f"(Preemptible=yes): {never}") in check.stderr, check.stderr
        assert f"P1 (p1-guaranteed) may preempt P0 (Preempts=): {never}" in check.stderr
        with open(log, errors="replace") as f:
            f.seek(log_size)
            new_log = f.read()
        for plugin in ("job_submit/planc", "preempt/planc", "jobcomp/planc", "slurmctld/planc"):
            assert (f"{plugin}: warning: {conf}: P0 (p0-lease) is preemptible "
                    f"(Preemptible=yes): {never}") in new_log, plugin
    finally:
        cluster.set_planc_conf([])


def test_unreadable_state_files_are_reported_not_taken_for_a_first_start(cluster):
    """A state file that exists but cannot be read (here a directory in its
    place: root reads a mode 000 file) is named in an error line with what
    the plugin does, and moved aside rather than overwritten."""
    import glob
    import signal
    import time
    cluster.cancel_all()
    state = os.path.join(cluster.dir, "state", "ctld")
    log = os.path.join(cluster.dir, "log", "slurmctld.log")
    pid = int(open(os.path.join(cluster.dir, "run", "slurmctld.pid")).read())
    os.kill(pid, signal.SIGKILL)  # no fini(): nothing rewrites the files
    cluster.wait_for("slurmctld to be gone", lambda: not os.path.exists(f"/proc/{pid}"),
                     timeout=30)
    paths = {p: os.path.join(state, f) for p, f in (("preempt/planc", "planc_preempt_state"),
                                                     ("slurmctld/planc", "planc_spot_state"))}
    for path in paths.values():
        if os.path.exists(path):
            os.remove(path)
        os.mkdir(path, 0)
    log_size = os.path.getsize(log)
    try:
        up = cluster.ctl("up", check=False, timeout=300)
        assert up.returncode == 0, up.stdout + up.stderr
        with open(log, errors="replace") as f:
            f.seek(log_size)
            new_log = f.read()
        consequence = {
            "preempt/planc": "starting with no preemptions counted (the per-job cap restarts "
                             "from zero) and no grace in progress",
            "slurmctld/planc": "today's spot use restarts from zero"}
        for plugin, path in paths.items():
            line = next((l for l in new_log.splitlines()
                         if f"error: {plugin}: {path} is unreadable" in l), None)
            assert line, new_log[-3000:]
            assert (f"(cannot read {path}: Is a directory); moved aside to {path}.bad-") in line
            assert line.endswith(consequence[plugin]), line
            assert os.path.isdir(glob.glob(path + ".bad-*")[0])
        # The cluster works on.
        jobid, p = cluster.sbatch("-A", "acct-spot", "--qos=p3", "--hold", "--wrap", "true",
                                  user="pcbob")
        assert jobid, p.stderr
        cluster.run("scancel", jobid, check=True)
    finally:
        for path in paths.values():
            for bad in glob.glob(path + ".bad-*"):
                os.rmdir(bad)


def test_planc_conf_check_asks_slurmdbd_whether_a_pools_account_may_use_its_tier(cluster,
                                                                                 tmp_path):
    """Capacity infusion's pools (issue 16): `planc-conf check` asks slurmdbd
    that each pool's account and user may use the pool's tier, and fails
    with what to run when one may not."""
    from conftest import ROOT
    tool = os.path.join(ROOT, "planc-conf")
    example = open(os.path.join(ROOT, "etc", "planc.conf.example")).read()
    n = example.count("\n") + 1  # the pool's line number

    def check(pool):
        path = tmp_path / "planc.conf"
        path.write_text(example + pool + "\n")
        return str(path), cluster.run(tool, "check", str(path))

    serve = f"{ROOT}/etc/pools/serve.sh"
    path, ok = check("Pool=maas Tier=P1 Account=acct-api User=pcpool "
                     f"Script={serve} MaxReplicas=4 DrainGrace=20s")
    assert ok.returncode == 0, ok.stderr
    assert f"maas             P1   acct-api         pcpool       1    0   4   20s   {serve}\n" \
        in ok.stdout, ok.stdout
    path, no = check(f"Pool=maas Tier=P1 Account=acct-spot User=pcbob Script={serve}")
    assert no.returncode == 1
    msg = [l for l in no.stderr.splitlines() if l.startswith("planc-conf: ")
           and "warning" not in l]
    assert len(msg) == 1, no.stderr
    head = (f"planc-conf: {path}:{n}: pool 'maas': account acct-spot (user pcbob) may not use "
            "p1-guaranteed (P1), the pool's tier: its QOS are ")
    assert msg[0].startswith(head), msg
    qos, _, advice = msg[0][len(head):].partition(" ")
    assert set(qos.split(",")) == {"p2-spot", "p3-spot"}, msg
    assert advice == ("(sacctmgr modify user pcbob account=acct-spot set "
                      "qos+=p1-guaranteed)"), msg
    assert f"{path}: OK" not in no.stdout
    path, none = check(f"Pool=maas Tier=P3 Account=acct-api User=pcbob Script={serve}")
    assert none.returncode == 1
    assert (f"planc-conf: {path}:{n}: pool 'maas': user pcbob has no association in account "
            "acct-api (sacctmgr add user pcbob account=acct-api qos=p3-spot)") in none.stderr, \
        none.stderr


def test_planc_admin_check_reports_a_changed_qos_and_setup_mends_it(cluster):
    """An admin changes a tier's QoS by hand with sacctmgr: planc-admin
    check names it with the command that fixes it and exits 1; setup
    without --apply changes nothing; setup --apply makes check clean."""
    from conftest import ROOT
    admin = os.path.join(ROOT, "tools", "planc-admin")
    su = f"host={cluster.env['PGHOST']} port={cluster.env['PGPORT']} dbname=planc user=postgres"
    # The test cluster's PostgreSQL trusts local connections: root may be
    # the postgres role itself (and the tree may not be readable by postgres).
    db = ["--db", su, "--db-as", "root"]

    def grace():
        r = cluster.run("sacctmgr", "-n", "-P", "show", "qos", "p2-spot", "format=GraceTime",
                        check=True)
        return r.stdout.strip()

    try:
        # Whatever earlier tests left, setup converges first.
        r = cluster.run(admin, "setup", *db, "--apply", timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        r = cluster.run(admin, "check", *db, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "planc-admin check: the cluster matches" in r.stdout, r.stdout
        assert "DRIFT" not in r.stdout

        cluster.run("sacctmgr", "-i", "modify", "qos", "where", "name=p2-spot", "set",
                    "GraceTime=10", check=True)
        r = cluster.run(admin, "check", *db, timeout=180)
        assert r.returncode == 1, r.stdout + r.stderr
        assert ("DRIFT QoS p2-spot: GraceTime is 00:00:10, planc.conf wants 30\n"
                "  fix: sacctmgr -i modify qos where name=p2-spot set GraceTime=30\n") in r.stdout, \
            r.stdout
        assert "planc-admin check: 1 item(s) drifted" in r.stdout, r.stdout

        r = cluster.run(admin, "setup", *db, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "would apply: QoS p2-spot" in r.stdout, r.stdout
        assert "run with --apply" in r.stdout, r.stdout
        assert grace() == "00:00:10", "setup without --apply changed the QoS"

        r = cluster.run(admin, "setup", *db, "--apply", timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        assert grace() == "00:00:30"
        r = cluster.run(admin, "check", *db, timeout=180)
        assert r.returncode == 0 and "DRIFT" not in r.stdout, r.stdout + r.stderr
    finally:
        cluster.run("sacctmgr", "-i", "modify", "qos", "where", "name=p2-spot", "set",
                    "GraceTime=30")


def test_sync_roles_dry_run_lists_a_new_users_role_and_changes_nothing(cluster):
    """planc-bill sync-roles --dry-run names the login role a new Slurm user
    would get, and creates nothing; without --dry-run the role exists."""
    from conftest import ROOT
    bill = os.path.join(ROOT, "planc-bill")
    db = f"host={cluster.env['PGHOST']} port={cluster.env['PGPORT']} dbname=planc user=postgres"

    def has_role():
        r = cluster.run("psql", "-X", "-tA", "-d", db, "-c",
                        "SELECT count(*) FROM pg_roles WHERE rolname = 'pcdryrun'", check=True)
        return r.stdout.strip() == "1"

    cluster.run("sacctmgr", "-i", "add", "user", "pcdryrun", "account=acct-spot", check=True)
    try:
        r = cluster.run(bill, "--db", db, "sync-roles", "--dry-run")
        assert r.returncode == 0, r.stderr
        assert "would create login role pcdryrun in planc_reader\n" in r.stdout, r.stdout
        assert "nothing was changed" in r.stdout
        assert not has_role(), "--dry-run created the role"
        r = cluster.run(bill, "--db", db, "sync-roles")
        assert r.returncode == 0, r.stderr
        assert has_role()
    finally:
        cluster.run("sacctmgr", "-i", "delete", "user", "pcdryrun")
        cluster.run("psql", "-X", "-d", db, "-c", "DROP ROLE IF EXISTS pcdryrun")
