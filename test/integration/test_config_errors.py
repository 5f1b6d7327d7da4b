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
