-- What retention removed, per event type: the highest id of an event of that
-- type that a prune deleted. A reader whose cursor is below it would miss
-- events that are gone; the consumer dispatcher reads it (through
-- kumiko_log_pruned_up_to) to stop such a shard instead of advancing it
-- silently. Prunes run before this version are not recorded.
CREATE TABLE {{schema}}.kumiko_pruned_types (
    type         text        PRIMARY KEY,
    pruned_up_to bigint      NOT NULL,
    pruned_at    timestamptz NOT NULL DEFAULT now()
);

-- The highest id a prune removed among events of the given types (NULL: of
-- any type); 0 when none was removed.
CREATE FUNCTION {{schema}}.kumiko_log_pruned_up_to(types text[]) RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    RETURN (SELECT COALESCE(max(pruned_up_to), 0) FROM {{schema}}.kumiko_pruned_types
        WHERE types IS NULL OR type = ANY (types));
END $$;
