-- A tidy run that ended `timed_out` (its approval, or the run, passed its
-- deadline) before Flowdesk recorded timeouts in `tidy_moves` kept its
-- `planned` rows: an export showed those files still planned and the app's
-- preview counted them to move, though they never will be. They become
-- `skipped` with the reason the tidy flow gives them now (its
-- `on_timed_out` option: `TIMED_OUT` in desktop_app/flows/tidy.py).

UPDATE tidy_moves
   SET status = 'skipped',
       reason = 'the approval timed out before an answer; nothing was moved'
 WHERE status = 'planned'
   AND run_id IN (SELECT run_id FROM runs WHERE status = 'timed_out');
