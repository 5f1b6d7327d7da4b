-- Plan C billing schema, version 2: exact amounts, exit codes as sacct shows
-- them.  Applied by sql/planc-migrate after 0001.
--
-- Apply it with slurmctld stopped (its spool keeps the bills meanwhile) and
-- start slurmctld with the jobcomp/planc of the same release: an older
-- plugin does not write amount_micros, and PostgreSQL refuses its bills
-- (they are set aside in the spool's .rejected files; `planc-bill
-- reconcile --fill` writes them again).
--
-- Money, the rule (common/billing.h):
--   planc.bill.amount_micros    the bill's amount in 1e-6 of `currency`: the
--                               exact amount rounded once, half up, to a
--                               micro-unit.  What invoices sum.
--   planc.bill.amount_minor     that bill alone rounded half up to minor units
--                               (1/100 of `currency`), for reading one bill;
--                               never summed (summing it is what lost up to
--                               half a minor unit per bill before this).
--   planc.usage_hourly.amount_micros  sum of the hour's slices of bills
--   planc.usage_hourly.amount_minor   that sum rounded once, half up: one
--                               invoice line per hour x account x user x tier
-- Bills stored before this migration were rounded to minor units per bill;
-- their exact amounts are not known any more: amount_micros is their
-- amount_minor in micro-units, and their note says so.

ALTER TABLE planc.bill RENAME COLUMN exit_code TO wait_status;
ALTER TABLE planc.bill
  ADD COLUMN exit_status   integer,
  ADD COLUMN exit_signal   integer,
  ADD COLUMN exit_code     text,
  ADD COLUMN amount_micros bigint;

-- POSIX wait status: WIFEXITED is (s & 127) = 0, WEXITSTATUS (s >> 8) & 255;
-- WIFSIGNALED is (s & 127) in 1..126, WTERMSIG s & 127.
UPDATE planc.bill SET
  exit_status = CASE WHEN wait_status & 127 = 0 THEN (wait_status >> 8) & 255 ELSE 0 END,
  exit_signal = CASE WHEN wait_status & 127 BETWEEN 1 AND 126 THEN wait_status & 127 ELSE 0 END,
  amount_micros = amount_minor * 10000;
-- sacct's ExitCode (src/sacct/print.c): a signal shows as 0:SIG; an exit
-- status of 128 or more loses 128 (exit 143 shows as 15:0).
UPDATE planc.bill SET exit_code =
  CASE WHEN exit_signal <> 0 THEN '0:' || exit_signal
       WHEN exit_status >= 128 THEN (exit_status - 128) || ':0'
       ELSE exit_status || ':0' END;
UPDATE planc.bill SET note = note ||
  'amount_micros is amount_minor: billed before exact amounts were kept (schema 0002); '
  WHERE amount_minor > 0;
-- Before 0002 a short run could round to 0 with no reason given.
UPDATE planc.bill SET zero_reason =
  'rounded to 0 minor units per bill (billed before exact amounts were kept, schema 0002)'
  WHERE amount_minor = 0 AND zero_reason = '';

ALTER TABLE planc.bill
  ALTER COLUMN exit_status SET NOT NULL,
  ALTER COLUMN exit_signal SET NOT NULL,
  ALTER COLUMN exit_code SET NOT NULL,
  ALTER COLUMN amount_micros SET NOT NULL,
  ADD CONSTRAINT bill_amount_micros_check CHECK (amount_micros >= 0),
  -- A bill of 0 always says why.
  ADD CONSTRAINT bill_zero_has_reason CHECK (amount_micros > 0 OR zero_reason <> '');

COMMENT ON COLUMN planc.bill.wait_status IS
  'raw wait status of the job as Slurm reports it (36608 = exit 143)';
COMMENT ON COLUMN planc.bill.exit_status IS 'WEXITSTATUS: the value the job exited with, 0 if a signal killed it';
COMMENT ON COLUMN planc.bill.exit_signal IS 'WTERMSIG: the signal that killed the job, 0 if it exited';
COMMENT ON COLUMN planc.bill.exit_code IS 'ExitCode as sacct prints it, e.g. 15:0 for exit 143, 0:9 for SIGKILL';
COMMENT ON COLUMN planc.bill.amount_micros IS
  'the amount in 1e-6 of currency: exact, rounded once half up to a micro-unit; what totals sum';
COMMENT ON COLUMN planc.bill.amount_minor IS
  'this bill alone rounded half up to minor units (1/100 of currency); for reading, never summed';

-- Hourly totals: summed micro-units, and the hour's minor units rounded
-- once from them (a generated column, so the rule cannot drift).
ALTER TABLE planc.usage_hourly ADD COLUMN amount_micros bigint;
UPDATE planc.usage_hourly SET amount_micros = amount_minor * 10000;
ALTER TABLE planc.usage_hourly ALTER COLUMN amount_micros SET NOT NULL;
ALTER TABLE planc.usage_hourly DROP COLUMN amount_minor;
ALTER TABLE planc.usage_hourly
  ADD COLUMN amount_minor bigint GENERATED ALWAYS AS ((amount_micros + 5000) / 10000) STORED;
COMMENT ON COLUMN planc.usage_hourly.amount_micros IS 'sum of the bills'' slices in this hour, 1e-6 of currency';
COMMENT ON COLUMN planc.usage_hourly.amount_minor IS
  'amount_micros rounded once, half up, to minor units: this row as one invoice line';
