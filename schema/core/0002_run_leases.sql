-- Run leases: a process claims a run (owner id + expiry, UTC epoch seconds)
-- before executing it, renews the lease while it works and with every
-- checkpoint, and releases it when it stops. Another process never executes
-- a run whose lease is live; after the owner dies the lease expires and the
-- run can be taken over.
ALTER TABLE runs ADD COLUMN lease_owner TEXT;
ALTER TABLE runs ADD COLUMN lease_expires_at REAL;
