-- Functions through which the packages built on the store read the log inside
-- their own statements, where a statement must see the log and their own rows
-- in one snapshot (a consumer's pass lock and its status), without naming the
-- store's tables. They are PL/pgSQL so that each session plans their queries
-- once. Ids are those of committed events visible to the calling statement.

-- The newest event id, 0 for an empty log.
CREATE FUNCTION {{schema}}.kumiko_log_head() RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    RETURN (SELECT COALESCE(max(id), 0) FROM {{schema}}.kumiko_events);
END $$;

-- How many events have an id in (after, up_to].
CREATE FUNCTION {{schema}}.kumiko_log_count(after bigint, up_to bigint) RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    RETURN (SELECT count(*) FROM {{schema}}.kumiko_events WHERE id > after AND id <= up_to);
END $$;

-- When the first event with an id in (after, up_to] was created; NULL when
-- there is none.
CREATE FUNCTION {{schema}}.kumiko_log_first_created_at(after bigint, up_to bigint) RETURNS timestamptz
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    RETURN (SELECT created_at FROM {{schema}}.kumiko_events WHERE id > after AND id <= up_to ORDER BY id LIMIT 1);
END $$;

-- The id of the first event after the given one; NULL when there is none.
CREATE FUNCTION {{schema}}.kumiko_log_next(after bigint) RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    RETURN (SELECT id FROM {{schema}}.kumiko_events WHERE id > after ORDER BY id LIMIT 1);
END $$;
