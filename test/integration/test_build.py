"""What the build hands slurmctld: each plugin exports Slurm's plugin
symbols and Plan C's planc_*_v1 hooks, nothing else (no C++ library
symbol of ours lands in slurmctld's namespace; plugins/plugin.map)."""
import os
import subprocess

from conftest import ROOT

EXPORTS = {
    "job_submit_planc.so": {"job_submit", "job_modify"},
    "preempt_planc.so": {"preempt_p_preemptable", "preempt_p_job_preempt_check",
                         "preempt_p_get_data", "planc_preempt_run_end_v1",
                         "planc_preempt_control_v1"},
    "jobcomp_planc.so": {"jobcomp_p_set_location", "jobcomp_p_log_record", "jobcomp_p_get_jobs"},
    "slurmctld_planc.so": {"slurmctld_plugstack_p_get_config", "planc_spot_used_v1",
                           "planc_spot_refused_v1", "planc_market_floor_v1",
                           "planc_market_notice_v1", "planc_market_run_end_v1",
                           "planc_sample_now_v1", "planc_reclaiming_for_v1",
                           "planc_p3_running_v1"},
}
COMMON = {"plugin_name", "plugin_type", "plugin_version", "init", "fini"}
# The SPANK plugin has no init/fini: its entry points are slurm_spank_*.
SPANK = {"plugin_name", "plugin_type", "plugin_version", "spank_plugin_version",
         "slurm_spank_init", "slurm_spank_init_post_opt"}


def test_plugins_export_only_their_plugin_symbols():
    libs = os.environ.get("PLANC_PLUGIN_DIR", os.path.join(ROOT, "plugins", ".libs"))
    for name, own in EXPORTS.items():
        out = subprocess.run(["nm", "-D", "--defined-only", os.path.join(libs, name)],
                             capture_output=True, text=True, check=True).stdout
        symbols = {line.split()[-1] for line in out.splitlines() if line.strip()}
        assert symbols == COMMON | own, (name, sorted(symbols - COMMON - own))
    out = subprocess.run(["nm", "-D", "--defined-only", os.path.join(libs, "spank_planc.so")],
                         capture_output=True, text=True, check=True).stdout
    assert {line.split()[-1] for line in out.splitlines() if line.strip()} == SPANK
