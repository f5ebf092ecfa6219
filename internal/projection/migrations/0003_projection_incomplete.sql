-- A projection table created while the events it applies already existed
-- lacks them until it is built: incomplete_until is the highest such event
-- id (NULL: the table is complete). A rebuild that swaps its table in
-- clears it; a multi-stream projection is complete once its consumer has
-- passed it. Queries of an incomplete table answer
-- projection_rebuild_in_progress instead of partial rows.
ALTER TABLE {{schema}}.kumiko_projections ADD COLUMN IF NOT EXISTS incomplete_until bigint;
