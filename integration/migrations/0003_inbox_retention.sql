-- The inbox sweep deletes rows past the retention oldest first, in batches.
CREATE INDEX IF NOT EXISTS kumiko_inbox_handled_at ON {{schema}}.kumiko_inbox (handled_at);
