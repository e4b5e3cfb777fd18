-- A checksum on each checkpoint row and agent message row, verified on read:
-- bytes changed behind the store's back (even to another valid value) are
-- detected instead of resumed. Rows written before this file have NULL
-- (not verified).
ALTER TABLE checkpoints ADD COLUMN checksum text;
ALTER TABLE agent_messages ADD COLUMN checksum text;
