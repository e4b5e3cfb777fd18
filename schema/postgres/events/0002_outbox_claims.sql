-- Outbox claims (PostgreSQL tree): a dispatcher claims intents with
-- FOR UPDATE SKIP LOCKED; the expiry is decided by flowdesk_now(), the
-- database's clock. An intent left 'sending' is reconciled only once its
-- claim expired (its dispatcher died).
ALTER TABLE outbox ADD COLUMN claimed_by text;
ALTER TABLE outbox ADD COLUMN claim_expires_at timestamptz;
