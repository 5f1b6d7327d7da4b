"""Debian's real Prometheus, started privately on loopback beside the private
cluster, scrapes planc-exporter every second and evaluates Plan C's rules
with test-sized windows (test/prometheus/test-rules: 1 h becomes 1 min).  A
scenario of real jobs (a P0 job preempting one of four P3 jobs) must show in
Prometheus's HTTP API as the KPIs it implies, and the P3 preemption-rate
alert must reach `firing`."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

import pytest

from conftest import ROOT

EXPORTER = os.path.join(ROOT, "planc-exporter")
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prom:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path, **params):
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        try:
            return json.loads(urllib.request.urlopen(url, timeout=5).read())
        except OSError:
            return None

    def query(self, expr):
        """{frozenset(labels): value} of an instant query."""
        r = self.get("/api/v1/query", query=expr)
        if not r or r.get("status") != "success":
            return None
        return {frozenset((k, v) for k, v in s["metric"].items() if k not in ("job", "instance", "__name__")):
                float(s["value"][1]) for s in r["data"]["result"]}

    def value(self, expr):
        r = self.query(expr)
        return next(iter(r.values())) if r and len(r) == 1 else None


@pytest.fixture
def prom(cluster):
    for tool in (EXPORTER, PROMETHEUS):
        if not os.access(tool, os.X_OK):
            pytest.fail(f"{tool} missing: test/bootstrap installs prometheus and "
                        "prometheus-cpp-dev")
    c = cluster
    c.cancel_all()
    state = os.path.join(c.dir, "state", "ctld")
    # Every job ended before Prometheus starts: its windows see only the scenario.
    for source in ("slurmctld", "preempt", "jobcomp"):
        path = os.path.join(state, f"planc_metrics_{source}")
        t0 = time.time()
        c.wait_for(f"a {source} snapshot written after the queue emptied",
                   lambda: os.path.exists(path) and os.path.getmtime(path) > t0, timeout=30,
                   interval=0.2)
    work = tempfile.mkdtemp(prefix="planc-prom-", dir=c.dir)
    exporter_port, prom_port = free_port(), free_port()
    rules = subprocess.run([os.path.join(ROOT, "test", "prometheus", "test-rules"), "--factor",
                            "60"], capture_output=True, text=True, check=True).stdout
    with open(os.path.join(work, "rules.yml"), "w") as f:
        f.write(rules)
    with open(os.path.join(work, "prometheus.yml"), "w") as f:
        f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [rules.yml]
scrape_configs:
  - job_name: planc
    static_configs: [{{targets: ["127.0.0.1:{exporter_port}"]}}]
""")
    exporter = subprocess.Popen([EXPORTER, "--listen", f"127.0.0.1:{exporter_port}",
                                 "--state-dir", state], stderr=subprocess.DEVNULL)
    log = open(os.path.join(work, "prometheus.log"), "w")
    server = subprocess.Popen([PROMETHEUS, f"--config.file={work}/prometheus.yml",
                               f"--storage.tsdb.path={work}/data",
                               f"--web.listen-address=127.0.0.1:{prom_port}"],
                              stdout=log, stderr=subprocess.STDOUT, cwd=work)
    p = Prom(prom_port)
    try:
        c.wait_for("Prometheus to scrape the exporter", lambda: p.value(
            'planc_exporter_source_up{source="jobcomp"}') == 1.0, timeout=60)
        yield c, p
    finally:
        server.terminate()
        exporter.terminate()
        server.wait(timeout=30)
        exporter.wait(timeout=30)
        log.close()
        c.cancel_all()
        shutil.rmtree(work, ignore_errors=True)


def submit(c, user, account, qos, gpus):
    jobid, p = c.sbatch("-A", account, f"--qos={qos}", f"--gres=gpu:{gpus}", "--wrap",
                        "sleep 600", user=user)
    assert jobid, p.stderr
    return jobid


def test_kpis_and_an_alert_in_a_real_prometheus(prom):
    c, p = prom
    preempted0 = p.value('planc_preemptions_total{tier="P3"}')
    fillers = [submit(c, "pcbob", "acct-spot", "p3-spot", 8) for _ in range(4)]
    c.wait_for("the P3 jobs to run", lambda: all(c.state(j) == "RUNNING" for j in fillers))
    p0 = submit(c, "pcalice", "acct-lease", "p0-lease", 8)
    c.wait_for("the P0 job to run", lambda: c.state(p0) == "RUNNING", timeout=60)
    # It started within SlaStartSeconds (40 s) of its submission: the P0
    # SLA attainment of the (test-sized) hour is 100%.
    sla = c.wait_for("the P0 SLA attainment", lambda: p.value(
        'planc:sla_attainment:ratio_1h{tier="P0"}'), timeout=30)
    assert sla == pytest.approx(1.0), sla
    # One P3 job preempted (requeued, pending); the other three and the P0
    # job fill the pool.
    c.wait_for("Prometheus to see the preemption", lambda: p.value(
        'planc_preemptions_total{tier="P3"}') == preempted0 + 1, timeout=30)
    c.wait_for("a full pool in Prometheus",
               lambda: p.value("planc:gpu_utilisation:ratio") == 1.0, timeout=30)
    by_tier = c.wait_for("utilisation per tier", lambda: (lambda r: r if r and len(r) >= 2 else None)(
        p.query("planc:gpu_utilisation_by_tier:ratio > 0")), timeout=30)
    assert by_tier == {frozenset({("tier", "P0")}): 0.25, frozenset({("tier", "P3")}): 0.75}
    assert p.value('planc_preemptions_per_job_24h_max{tier="P3"}') >= 1
    # The P3 rate: 1 preemption over the P3 runs of the last (test-sized)
    # hour: the preempted run, ended, and the 3 still running: 1/4, give or
    # take Prometheus's extrapolation of increase() at the window's edge.
    rate = c.wait_for("the P3 preemption rate", lambda: p.value(
        "planc:p3_preemption_rate:ratio_1h"), timeout=30)
    assert 0.22 <= rate <= 0.30, rate
    # Above 20% for the alert's (test-sized) 15 s: firing.
    def firing():
        r = p.get("/api/v1/alerts")
        alerts = r["data"]["alerts"] if r else []
        return [a for a in alerts if a["labels"].get("alertname") == "PlancP3PreemptionRateHigh"
                and a["state"] == "firing"] or None
    alert = c.wait_for("PlancP3PreemptionRateHigh to fire", firing, timeout=60)[0]
    print("\nfiring:", alert["labels"], alert["annotations"]["summary"])
    assert alert["labels"]["tier"] == "P3" and alert["labels"]["severity"] == "warning"
    assert "of the P3 jobs that ran in the last hour were preempted" in \
        alert["annotations"]["summary"]
