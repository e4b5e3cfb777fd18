-- `tidy_moves` rows get a fifth status, `refused`: the move would have left
-- the folder (a symbolic link on the way, swapped in before or after the
-- plan), replaced a file that appeared meanwhile, or used an unsafe name
-- (`..`, a control character); nothing was moved. PostgreSQL alters the
-- CHECK constraint in place (the SQLite twin rebuilds the table).

ALTER TABLE tidy_moves DROP CONSTRAINT tidy_moves_status_check;
ALTER TABLE tidy_moves ADD CONSTRAINT tidy_moves_status_check
    CHECK (status IN ('planned', 'queued', 'moved', 'skipped', 'refused'));
COMMENT ON COLUMN tidy_moves.reason IS 'why a file was skipped or refused';
