-- Plan C schema, version 7: a market round nobody wins has no clearing
-- price, and a bid may lose for two more reasons.  Applied by
-- sql/planc-migrate after 0006.
--
-- clearing_micros is the highest price a winner of the round pays (each
-- winner pays the best losing bid that could have used its GPUs); NULL
-- when nobody won.  Rounds recorded before this version with no winner
-- kept the top losing bid there: set to NULL, as it was never paid.
-- A bid's outcome may now also be 'too large' (more GPUs than P2 can have
-- while guaranteed work runs) or 'held for larger' (the room was kept for
-- a larger bid that had waited longer).

ALTER TABLE planc.market_round ALTER COLUMN clearing_micros DROP NOT NULL;
UPDATE planc.market_round SET clearing_micros = NULL WHERE winners = 0;

ALTER TABLE planc.market_bid DROP CONSTRAINT market_bid_outcome_check;
ALTER TABLE planc.market_bid ADD CONSTRAINT market_bid_outcome_check
  CHECK (outcome IN ('won', 'outbid', 'no room', 'below floor', 'too large', 'held for larger'));
