-- Run leases: owner id + expiry. On PostgreSQL every lease decision is taken
-- by the database's clock, flowdesk_now(), never by a worker's clock.
-- flowdesk.time_offset_s (a session setting, tests only) shifts it.
ALTER TABLE runs ADD COLUMN lease_owner text;
ALTER TABLE runs ADD COLUMN lease_expires_at timestamptz;

CREATE FUNCTION flowdesk_now() RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT now() + coalesce(nullif(current_setting('flowdesk.time_offset_s', true), '')::float8, 0)
                   * interval '1 second'
$$;
