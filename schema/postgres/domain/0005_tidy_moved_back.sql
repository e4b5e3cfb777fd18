-- `flowdesk undo` (and the app's `u`) records when it put each file of a tidy
-- run back at its old place (or found it there already), so `show`, `answer`
-- and the app can say the run was undone; NULL: not moved back.

ALTER TABLE tidy_moves ADD COLUMN moved_back_at timestamptz;
