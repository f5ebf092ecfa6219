-- Rebuild state of inline and table-backed multi-stream projections: one row
-- per projection, created by its first rebuild (no row reads as 'ready').
--
-- Databases migrated before the tables moved here got them from the event
-- store's migration 3: IF NOT EXISTS keeps them as they are.
CREATE TABLE IF NOT EXISTS {{schema}}.kumiko_projections (
    name                    text        PRIMARY KEY,
    status                  text        NOT NULL DEFAULT 'ready' CHECK (status IN ('ready', 'rebuilding', 'failed')),
    -- The highest event id a rebuild has replayed into the shadow table (its
    -- progress while rebuilding; where the rebuilt table ends once ready).
    last_processed_event_id bigint      NOT NULL DEFAULT 0,
    last_rebuild_at         timestamptz,
    last_error              text        NOT NULL DEFAULT '',
    updated_at              timestamptz NOT NULL DEFAULT now()
);

-- Events a rebuild in quarantine mode could not apply and skipped.
CREATE TABLE IF NOT EXISTS {{schema}}.kumiko_projection_quarantine (
    projection  text        NOT NULL,
    event_id    bigint      NOT NULL,
    error       text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projection, event_id)
);
