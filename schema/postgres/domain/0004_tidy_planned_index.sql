-- The `apply` loop of `tidy` takes the first `planned` row of its run by
-- source path (code point order, `COLLATE "C"`) at every iteration. Through
-- the primary key that read stepped past every row already queued; this
-- index holds the planned rows only, in the order the loop reads them (the
-- SQLite twin needs no COLLATE: its BINARY order is code point order).

CREATE INDEX tidy_moves_planned ON tidy_moves (run_id, src COLLATE "C") WHERE status = 'planned';
