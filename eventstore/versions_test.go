package eventstore_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// RefuseUnknownVersionsTx refuses a stream holding an event above the
// known version of its type — queued in WithTx's transaction, answered by
// the next statement and the commit; at once on a savepoint, which rolls
// back leaving the transaction usable — and passes a stream at known
// versions, an unknown type, a missing stream and another tenant's stream.
func TestRefuseUnknownVersions(t *testing.T) {
	t.Parallel()
	db := kumikotest.NewDB(t)
	s, ctx := db.Store, context.Background()
	tenant, other := uuid.New(), uuid.New()
	known := eventstore.NewKnownVersions(map[string]int{"item.created": 1, "item.renamed": 2})
	appendTo := func(tenant uuid.UUID, evs ...eventstore.NewEvent) uuid.UUID {
		t.Helper()
		res, err := s.Append(ctx, eventstore.Stream{TenantID: tenant, AggregateType: "item"}, 0, evs...)
		require.NoError(t, err)
		return res.AggregateID
	}
	created := eventstore.NewEvent{Type: "item.created", Payload: map[string]any{}}
	renamed := func(v int) eventstore.NewEvent {
		return eventstore.NewEvent{Type: "item.renamed", EventVersion: v, Payload: map[string]any{}}
	}
	current := appendTo(tenant, created, renamed(2), eventstore.NewEvent{Type: "item.tagged", EventVersion: 7, Payload: map[string]any{}})
	newer := appendTo(tenant, created, renamed(3), renamed(2))
	foreign := appendTo(other, created, renamed(3))

	check := func(tenant, id uuid.UUID) error {
		return s.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if err := s.RefuseUnknownVersionsTx(ctx, tx, tenant, id, known); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "SELECT 1")
			return err
		})
	}
	for name, id := range map[string]uuid.UUID{"known versions": current, "missing": uuid.New(), "another tenant's": foreign} {
		require.NoError(t, check(tenant, id), name)
	}
	var unknown *eventstore.UnknownEventVersionError
	require.ErrorAs(t, check(tenant, newer), &unknown)
	require.Equal(t, eventstore.UnknownEventVersionError{Type: "item.renamed", Version: 3, Current: 2}, *unknown)
	require.Equal(t, "event_schema_unknown_version", eventstore.Code(unknown))

	// Queued and nothing sent after it: the commit answers.
	err := s.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return s.RefuseUnknownVersionsTx(ctx, tx, tenant, newer, known)
	})
	require.ErrorIs(t, err, eventstore.ErrUnknownEventVersion)

	// On a savepoint: refused at once, and the transaction goes on.
	require.NoError(t, s.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		sp, err := tx.Begin(ctx)
		require.NoError(t, err)
		require.ErrorIs(t, s.RefuseUnknownVersionsTx(ctx, sp, tenant, newer, known), eventstore.ErrUnknownEventVersion)
		require.NoError(t, sp.Rollback(ctx))
		_, err = tx.Exec(ctx, "SELECT 1")
		return err
	}))
}
