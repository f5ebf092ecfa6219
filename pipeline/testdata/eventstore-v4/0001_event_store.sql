-- The event store: one append-only table of events, snapshots as a cache, and the archive marker.
CREATE TABLE {{schema}}.kumiko_events (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    aggregate_id   uuid        NOT NULL,
    aggregate_type text        NOT NULL,
    tenant_id      uuid        NOT NULL,
    version        integer     NOT NULL CHECK (version > 0),
    type           text        NOT NULL,
    event_version  integer     NOT NULL DEFAULT 1 CHECK (event_version > 0),
    payload        jsonb       NOT NULL CHECK (jsonb_typeof(payload) = 'object'),
    metadata       jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    created_at     timestamptz NOT NULL DEFAULT now(),
    created_by     text        NOT NULL DEFAULT '',
    CONSTRAINT kumiko_events_stream_version UNIQUE (aggregate_id, version)
);

-- Rebuilds and retention read one aggregate type in global order.
CREATE INDEX kumiko_events_type_id ON {{schema}}.kumiko_events (aggregate_type, id);

CREATE TABLE {{schema}}.kumiko_snapshots (
    aggregate_id     uuid        NOT NULL,
    tenant_id        uuid        NOT NULL,
    aggregate_type   text        NOT NULL,
    version          integer     NOT NULL CHECK (version > 0),
    state            jsonb       NOT NULL,
    snapshot_version integer     NOT NULL DEFAULT 1,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (aggregate_id, snapshot_version, version)
);

CREATE TABLE {{schema}}.kumiko_archived_streams (
    aggregate_id   uuid        PRIMARY KEY,
    tenant_id      uuid        NOT NULL,
    aggregate_type text        NOT NULL,
    archived_at    timestamptz NOT NULL DEFAULT now(),
    archived_by    text        NOT NULL DEFAULT '',
    reason         text        NOT NULL DEFAULT ''
);
