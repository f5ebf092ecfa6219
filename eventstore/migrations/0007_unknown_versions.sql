-- Refuses a write to a stream that holds an event of a newer schema version
-- than the writer knows (a newer release wrote it): the writer would append
-- over history it cannot read. known_types/known_versions are the writer's
-- event types and the newest version of each; types it does not know pass,
-- as the upcaster passes them. Only events above version 1 can be newer, so
-- a stream of version-1 events is refused nothing. The error is SQLSTATE
-- KU001 with the event type as its DETAIL and its version as its HINT.
CREATE FUNCTION {{schema}}.kumiko_refuse_unknown_versions(
    stream uuid, tenant uuid, known_types text[], known_versions integer[]) RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
    newer_type    text;
    newer_version integer;
BEGIN
    SELECT e.type, e.event_version INTO newer_type, newer_version
    FROM {{schema}}.kumiko_events e
    JOIN unnest(known_types, known_versions) AS k(event_type, newest) ON k.event_type = e.type
    WHERE e.aggregate_id = stream AND e.tenant_id = tenant AND e.event_version > 1 AND e.event_version > k.newest
    ORDER BY e.version
    LIMIT 1;
    IF newer_type IS NOT NULL THEN
        RAISE EXCEPTION 'stream % holds event % at version %, newer than the writer knows', stream, newer_type, newer_version
            USING ERRCODE = 'KU001', DETAIL = newer_type, HINT = newer_version::text;
    END IF;
END $$;

-- The check above looks only at events above version 1: this index holds
-- just those, so a stream with none costs one empty index lookup instead
-- of a walk of its events. Appends of version-1 events do not touch it.
CREATE INDEX kumiko_events_newer_versions ON {{schema}}.kumiko_events (aggregate_id) WHERE event_version > 1;
