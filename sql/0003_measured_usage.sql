-- Plan C billing schema, version 3: the measured-usage track.  Applied by
-- sql/planc-migrate after 0002; idempotent on its own as well (IF NOT
-- EXISTS, a GRANT repeated is a no-op), so applying it twice changes
-- nothing.
--
-- A bill is priced on what the run was allocated (cores, memory, cards).
-- Beside it, each bill now keeps what the run actually used, where Slurm's
-- job accounting measured it (JobAcctGatherType=jobacct_gather/linux or
-- /cgroup): slurmctld does not hold step usage when jobcomp/planc writes
-- the bill, so these columns are written afterwards from slurmdbd's step
-- records by `planc-bill measure` (etc/systemd/planc-bill-measure.timer
-- runs it every 5 minutes).  Nothing here changes an amount.
--
-- NULL means not measured, never zero:
--   measured_at NULL              measure has not read the run yet (slurmdbd
--                                 has no end of it yet, or measure has not
--                                 run since);
--   measured_at set, usage NULL   slurmdbd has the run but its steps carry
--                                 no accounting data (JobAcctGatherType=
--                                 jobacct_gather/none, a run that never
--                                 held a node, steps lost);
--   gpu_util_percent NULL         always, on Debian's Slurm 22.05: GPU
--                                 utilisation needs Slurm's NVML support
--                                 (gpu/nvml), which that build lacks.
--
-- Apply it before starting a slurmctld whose jobcomp/planc writes these
-- columns (it writes them as NULL; without them PostgreSQL refuses the
-- COPY and the spool keeps the bills until the migration is applied).
-- An older jobcomp/planc keeps working against this schema.

ALTER TABLE planc.bill
  ADD COLUMN IF NOT EXISTS measured_at       timestamptz,
  ADD COLUMN IF NOT EXISTS used_cpu_seconds  numeric(20,6),
  ADD COLUMN IF NOT EXISTS max_rss_bytes     bigint,
  ADD COLUMN IF NOT EXISTS tres_usage_in_tot text,
  ADD COLUMN IF NOT EXISTS gpu_util_percent  numeric(6,3);

COMMENT ON COLUMN planc.bill.measured_at IS
  'when planc-bill measure read the run''s steps from slurmdbd; NULL: not yet';
COMMENT ON COLUMN planc.bill.used_cpu_seconds IS
  'CPU time the run used, user + system, summed over its finished steps (sacct''s TotalCPU); NULL: not measured';
COMMENT ON COLUMN planc.bill.max_rss_bytes IS
  'largest MaxRSS of the run''s steps (sacct''s MaxRSS: peak resident set of one task), bytes; NULL: not measured';
COMMENT ON COLUMN planc.bill.tres_usage_in_tot IS
  'the steps'' TRESUsageInTot summed per TRES, Slurm''s units (cpu ms; mem, vmem, fs/disk bytes; energy J); NULL: not measured';
COMMENT ON COLUMN planc.bill.gpu_util_percent IS
  'GPU utilisation; NULL: not measurable on Debian''s Slurm 22.05 (no gpu/nvml)';

-- Bills not measured yet, by end: what each measure run looks for.
CREATE INDEX IF NOT EXISTS bill_unmeasured_idx ON planc.bill (end_time) WHERE measured_at IS NULL;

-- The writer (planc-bill measure runs as it) may set these columns and no
-- other: it still cannot change what a bill charges.
GRANT UPDATE (measured_at, used_cpu_seconds, max_rss_bytes, tres_usage_in_tot, gpu_util_percent)
  ON planc.bill TO planc_writer;
