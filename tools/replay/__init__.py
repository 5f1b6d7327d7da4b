"""planc-replay, the analysis half: workloads in, report out.

No cluster is needed here.  `workload` reads GPU-cluster traces (Alibaba
GPU 2023, Helios, Philly, an admin's own sacct) and generates seeded
synthetic workloads, all into one neutral job list and CSV file, and says
how time compression (factor k) scales the policy's clocks.  `report`
reads what the cluster-driving half collects from a replay (jobs.csv,
segments.csv, sacct_segments.csv, run.json) and computes the section 9
KPIs with docs/metrics-and-alerts.md's metric definitions, the consistency checks, the
stock-vs-planc comparison and the plots.

Only the Python standard library and Debian bookworm's python3-numpy and
python3-matplotlib (plots only) are used.
"""
