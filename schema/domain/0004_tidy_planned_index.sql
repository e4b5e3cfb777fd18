-- The `apply` loop of `tidy` takes the first `planned` row of its run by
-- source path at every iteration. Through the primary key (run_id, src) that
-- read stepped past every row already queued: the N-th move read N rows, and
-- 100,000 moves slowed from 160 to 24 a second. This index holds the planned
-- rows only, in the order the loop reads them, so each read is one step.

CREATE INDEX tidy_moves_planned ON tidy_moves(run_id, src) WHERE status = 'planned';
