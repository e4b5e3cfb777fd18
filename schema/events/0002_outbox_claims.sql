-- Outbox claims: a dispatcher claims intents (owner id + expiry, UTC epoch
-- seconds) before sending them, so two dispatchers never send the same
-- intent at once; an intent left 'sending' is reconciled only once its
-- claim expired (its dispatcher died).
ALTER TABLE outbox ADD COLUMN claimed_by TEXT;
ALTER TABLE outbox ADD COLUMN claim_expires_at REAL;
