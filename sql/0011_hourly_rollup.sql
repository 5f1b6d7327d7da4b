-- Plan C billing schema, version 11: the hourly totals are folded in after
-- the bills are stored, not in the bills' own transaction.
--
-- Until this version jobcomp/planc's writer added each batch's hour
-- slices to planc.usage_hourly in the transaction that stored the batch.
-- A GPU cloud's runs last minutes to a day and belong to thousands of
-- users, so a batch of 5,000 bills touched tens of thousands of hourly
-- rows, and that upsert took about half of the writer's time: a backlog
-- drained at 0.35-0.5 of a raw COPY's speed.  Folded in later, many
-- bills' slices of the same user and hour make one hourly row.
--
--   planc.bill.seq          a bill's number, given as it is stored (the
--                           column's default, planc.next_bill_seq()) by a
--                           writer that leaves its hours for later; NULL
--                           for the bills stored before this migration,
--                           whose hours are counted already, and for those
--                           of a writer that adds their hours itself
--   planc.rollup_state      the number up to which bills are counted in
--                           planc.usage_hourly
--
-- Folding in (jobcomp/planc's writer after each batch of spool files it
-- stored, `planc-bill reconcile` after its bills, `planc-bill rollup` by
-- hand) is one transaction: it takes the advisory lock below exclusively,
-- reads the bills numbered above planc.rollup_state.last_seq, adds their
-- hour slices to planc.usage_hourly and moves last_seq to the highest
-- number it read.  Every bill is counted once: its slices and the new
-- last_seq commit together.
--
-- Why a number is enough: PostgreSQL hands out sequence numbers in the
-- order they are asked for, not the order their transactions commit, so a
-- transaction still in flight may commit a number below one already
-- visible.  planc.next_bill_seq() takes the advisory lock shared, held to
-- the end of the bill's transaction, before it asks, and folding in takes
-- it exclusively first: while it reads, no transaction that holds a
-- number is in flight.  The sequence caches no numbers, for the same
-- reason (a session's cached block could commit below last_seq later).
--
-- Retention: a month detached before its bills were folded in takes them
-- with it; `planc-bill rollup` first (sql/README.md, "Retention").
--
-- Changes no row; adding the column rewrites nothing.  The index reads
-- every stored bill once to be built (none goes in it), under a lock that
-- keeps the writer out meanwhile: bills wait in jobcomp/planc's spool and
-- are stored when the migration commits.

SET LOCAL TimeZone = 'UTC';

CREATE SEQUENCE planc.bill_seq AS bigint CACHE 1 NO CYCLE;
COMMENT ON SEQUENCE planc.bill_seq IS
  'planc.bill.seq: the order bills were stored in; folded into planc.usage_hourly up to planc.rollup_state.last_seq';

-- The lock's key: hashtext('planc.bill_seq'), as ensure_month's is its
-- name's hash.
-- Only a writer that leaves the hours to be added afterwards numbers its
-- bills: jobcomp/planc and planc-bill of this release say so with
-- `SET planc.hours_later = on`.  A writer of an earlier release (still
-- running while the database is migrated) adds each batch's hours itself,
-- and a bill made by hand was never counted: both stay unnumbered, so no
-- bill is ever counted twice.
CREATE FUNCTION planc.next_bill_seq() RETURNS bigint
  LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF pg_catalog.current_setting('planc.hours_later', true) IS DISTINCT FROM 'on' THEN
    RETURN NULL;
  END IF;
  PERFORM pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtext('planc.bill_seq'));
  RETURN pg_catalog.nextval('planc.bill_seq'::pg_catalog.regclass);
END $$;
COMMENT ON FUNCTION planc.next_bill_seq() IS
  'planc.bill.seq''s default: for a writer that set planc.hours_later, the next number, under the shared lock that adding the hours takes exclusively; else NULL';

ALTER TABLE planc.bill ADD COLUMN seq bigint;
ALTER TABLE planc.bill ALTER COLUMN seq SET DEFAULT planc.next_bill_seq();
COMMENT ON COLUMN planc.bill.seq IS
  'the order the bill was stored in (NULL: stored before schema 11, counted in planc.usage_hourly already)';
-- The bills above last_seq, in number order, without reading the others:
-- a btree of the numbered bills only (the ones stored before hold NULL and
-- cost it nothing).  A block-range index was tried: PostgreSQL must read
-- every page range it has not summarized yet, which after a bulk load of
-- 10 million bills was the whole table at each rollup (1.3 s, and the
-- planner took a sequential scan instead).
CREATE INDEX bill_seq_idx ON planc.bill (seq) WHERE seq IS NOT NULL;

CREATE TABLE planc.rollup_state (
  one      boolean PRIMARY KEY DEFAULT true CHECK (one),
  last_seq bigint  NOT NULL,
  at       timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE planc.rollup_state IS
  'one row: bills numbered up to last_seq are counted in planc.usage_hourly (folded in at `at`)';
INSERT INTO planc.rollup_state (one, last_seq) VALUES (true, 0);

-- The writer numbers the bills it stores and folds them in; nobody else
-- needs either.
GRANT USAGE ON SEQUENCE planc.bill_seq TO planc_writer;
REVOKE ALL ON FUNCTION planc.next_bill_seq() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION planc.next_bill_seq() TO planc_writer;
GRANT SELECT, UPDATE ON planc.rollup_state TO planc_writer;
