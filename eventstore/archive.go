package eventstore

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Archive marks the tenant's stream archived: it then reads as empty and
// refuses appends with ErrStreamArchived. Its events stay; Restore brings the
// stream back with its version line intact. Archiving an archived stream is a
// no-op; a missing or foreign stream answers ErrAggregateNotFound.
func (s *Store) Archive(ctx context.Context, tenant, id uuid.UUID, by, reason string) error {
	return TranslateError(s.archive(ctx, s.pool, tenant, id, by, reason))
}

// ArchiveTx is Archive inside the caller's transaction.
func (s *Store) ArchiveTx(ctx context.Context, tx pgx.Tx, tenant, id uuid.UUID, by, reason string) error {
	return TranslateError(s.archive(ctx, tx, tenant, id, by, reason))
}

func (s *Store) archive(ctx context.Context, q querier, tenant, id uuid.UUID, by, reason string) error {
	var found bool
	if err := q.QueryRow(ctx, s.sql.archive, id, tenant, by, reason).Scan(&found); err != nil {
		return fmt.Errorf("archive %s: %w", id, err)
	}
	if !found {
		return fmt.Errorf("%w: %s", ErrAggregateNotFound, id)
	}
	return nil
}

// Restore lifts the archive marker; the next append continues the version
// line. Restoring a stream that is not archived is a no-op; a missing or
// foreign stream answers ErrAggregateNotFound.
func (s *Store) Restore(ctx context.Context, tenant, id uuid.UUID) error {
	return TranslateError(s.restore(ctx, s.pool, tenant, id))
}

// RestoreTx is Restore inside the caller's transaction.
func (s *Store) RestoreTx(ctx context.Context, tx pgx.Tx, tenant, id uuid.UUID) error {
	return TranslateError(s.restore(ctx, tx, tenant, id))
}

func (s *Store) restore(ctx context.Context, q querier, tenant, id uuid.UUID) error {
	var found bool
	if err := q.QueryRow(ctx, s.sql.restore, id, tenant).Scan(&found); err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	if !found {
		return fmt.Errorf("%w: %s", ErrAggregateNotFound, id)
	}
	return nil
}

// IsArchived reports whether the tenant's stream is archived; false for
// missing and foreign streams.
func (s *Store) IsArchived(ctx context.Context, tenant, id uuid.UUID) (bool, error) {
	return translated(s.isArchived(ctx, s.pool, tenant, id))
}

// IsArchivedTx is IsArchived inside the caller's transaction.
func (s *Store) IsArchivedTx(ctx context.Context, tx pgx.Tx, tenant, id uuid.UUID) (bool, error) {
	return translated(s.isArchived(ctx, tx, tenant, id))
}

func (s *Store) isArchived(ctx context.Context, q querier, tenant, id uuid.UUID) (bool, error) {
	var archived bool
	if err := q.QueryRow(ctx, s.sql.isArchived, id, tenant).Scan(&archived); err != nil {
		return false, fmt.Errorf("is archived %s: %w", id, err)
	}
	return archived, nil
}
