-- Dispatchers claim intents (claim_intents): the claimant and until when
-- (UTC epoch seconds). A 'sending' intent whose claim expired was being sent
-- by a dispatcher that died; only such intents are reconciled, never one a
-- live dispatcher is sending. Rows from before this file have no claim and
-- count as expired.
ALTER TABLE outbox ADD COLUMN claimed_by TEXT;
ALTER TABLE outbox ADD COLUMN claim_expires_at REAL;
