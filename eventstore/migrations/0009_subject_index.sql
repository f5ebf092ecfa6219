-- The index of events by the subjects of their sealed fields, on an
-- expression without a function of our own: PostgreSQL evaluates a SQL
-- function in an index expression through its function executor on every
-- insert, which cost an append with personal fields more than the index
-- entries themselves. The values of the personal column are the subjects.
DROP INDEX {{schema}}.kumiko_events_subjects;
CREATE INDEX kumiko_events_subjects ON {{schema}}.kumiko_events
    USING gin (jsonb_path_query_array(personal, '$.*')) WHERE personal IS NOT NULL;
DROP FUNCTION {{schema}}.kumiko_subjects_of(jsonb);

-- Reads fetch a row's keys with a subquery of their own statement (planned
-- with it, by the keys' primary key) instead of this function.
DROP FUNCTION {{schema}}.kumiko_subject_keys_of(uuid, jsonb);
