-- Plan C schema, version 6: the P2 market's rounds and bids (policy 000,
-- section 5; issue 15, "Records").  Applied by sql/planc-migrate after 0005.
--
-- slurmctld/planc records every clearing: one row in planc.market_round
-- (when, the capacity offered, the vacancy over the interval, the floor,
-- the list price, the clearing price, how many bids and winners) and one
-- row per bid in planc.market_bid (whose job, the bid, the GPUs, the
-- outcome, the price a winner pays).  Prices are integers in micro-units
-- of planc.conf's Currency per card-hour, as slurmctld/planc computes them
-- (a bill's card_hour_price is the same unit).
--
-- Who sees what: the rounds are the public summaries, every Slurm user
-- reads them; a bid is read as a bill is (planc.may_read: its owner, the
-- account's coordinators, admins).  slurmctld's role (planc_writer)
-- inserts; nobody updates or deletes through these grants.

CREATE TABLE planc.market_round (
  cluster          text        NOT NULL,
  round_at         timestamptz NOT NULL,
  gpu_type         text        NOT NULL,
  capacity_gpus    integer     NOT NULL CHECK (capacity_gpus >= 0),
  allocated_gpus   integer     NOT NULL CHECK (allocated_gpus >= 0),
  vacancy_permille integer     CHECK (vacancy_permille BETWEEN 0 AND 1000),
  floor_micros     bigint      NOT NULL CHECK (floor_micros >= 0),
  list_micros      bigint      NOT NULL CHECK (list_micros >= 0),
  clearing_micros  bigint      NOT NULL CHECK (clearing_micros >= 0),
  bids             integer     NOT NULL CHECK (bids >= 0),
  winners          integer     NOT NULL CHECK (winners >= 0 AND winners <= bids),
  recorded_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (cluster, round_at, gpu_type)
);

CREATE TABLE planc.market_bid (
  cluster     text        NOT NULL,
  round_at    timestamptz NOT NULL,
  gpu_type    text        NOT NULL,
  job_id      bigint      NOT NULL,
  user_name   text        NOT NULL,
  account     text        NOT NULL,
  bid_micros  bigint      CHECK (bid_micros >= 0),  -- NULL: no --bid (bids the list price)
  gpus        integer     NOT NULL CHECK (gpus >= 0),
  submitted   timestamptz NOT NULL,
  outcome     text        NOT NULL CHECK (outcome IN ('won', 'outbid', 'no room', 'below floor')),
  pays_micros bigint      NOT NULL CHECK (pays_micros >= 0),
  PRIMARY KEY (cluster, round_at, gpu_type, job_id),
  FOREIGN KEY (cluster, round_at, gpu_type) REFERENCES planc.market_round
);
CREATE INDEX market_bid_user ON planc.market_bid (user_name, round_at);

ALTER TABLE planc.market_round ENABLE ROW LEVEL SECURITY;
ALTER TABLE planc.market_bid ENABLE ROW LEVEL SECURITY;

CREATE POLICY market_round_read ON planc.market_round FOR SELECT
  TO planc_reader, planc_admin USING (true);
CREATE POLICY market_round_write ON planc.market_round FOR ALL
  TO planc_writer USING (true) WITH CHECK (true);
CREATE POLICY market_bid_read ON planc.market_bid FOR SELECT
  TO planc_reader, planc_admin USING (planc.may_read(user_name, account));
CREATE POLICY market_bid_write ON planc.market_bid FOR ALL
  TO planc_writer USING (true) WITH CHECK (true);

GRANT SELECT ON planc.market_round, planc.market_bid TO planc_reader, planc_admin;
GRANT SELECT, INSERT ON planc.market_round, planc.market_bid TO planc_writer;
