package pipeline

import (
	"context"

	"github.com/kumiko-go/kumiko/internal/projection"
)

// The read side lives in internal/projection; these are its names as the
// pipeline's users know them.
type (
	// ListResult is a page of a CRUD list.
	ListResult = projection.ListResult
	// RebuildOptions tunes RebuildProjection.
	RebuildOptions = projection.RebuildOptions
	// RebuildResult is what a rebuild did.
	RebuildResult = projection.RebuildResult
	// ProjectionStatus is one projection's state (see ProjectionStatuses).
	ProjectionStatus = projection.ProjectionStatus
	// RowFeed is what a live channel follows of a projection's rows (see
	// Executor.RowFeed).
	RowFeed = projection.RowFeed
)

// Projection kinds and statuses (ProjectionStatus.Kind and Status).
const (
	ProjectionInline = projection.ProjectionInline
	ProjectionMSP    = projection.ProjectionMSP

	ProjectionReady      = projection.ProjectionReady
	ProjectionRebuilding = projection.ProjectionRebuilding
	ProjectionFailed     = projection.ProjectionFailed
)

// Sentinels of RebuildProjection.
var (
	ErrNoProjection   = projection.ErrNoProjection
	ErrRebuildRunning = projection.ErrRebuildRunning
)

// EnsureSchema creates the read tables of every entity and projection that
// do not exist yet and adds columns declared since (see
// internal/projection's Side.EnsureSchema).
func (d *Executor) EnsureSchema(ctx context.Context) error { return d.proj.EnsureSchema(ctx) }

// RebuildProjection rebuilds the inline or table-backed multi-stream
// projection called name from the stored events into a shadow table and
// swaps it in (see internal/projection's Side.RebuildProjection).
func (d *Executor) RebuildProjection(ctx context.Context, name string, opts RebuildOptions) (RebuildResult, error) {
	return d.proj.RebuildProjection(ctx, name, opts)
}

// ProjectionStatuses reports every inline projection and table-backed
// multi-stream projection, in registry order.
func (d *Executor) ProjectionStatuses(ctx context.Context) ([]ProjectionStatus, error) {
	return d.proj.ProjectionStatuses(ctx)
}

// RowFeed returns the feed of the projection called name: an inline
// projection, a table-backed multi-stream projection or an entity's read
// table (by entity name). An unknown name, a side-effect consumer, a table
// without a tenant_id column and an entity whose streams live in the system
// tenant have no feed: not_found (projection_not_found).
func (d *Executor) RowFeed(name string) (*RowFeed, error) { return d.proj.RowFeed(name) }

// ReasonReferenceNotFound is the Reason of the unprocessable answer to a
// write whose MustExist reference names no live row of the referenced
// entity in the writer's tenant. Details name the field; an id of another
// tenant answers exactly like one that names nothing.
const ReasonReferenceNotFound = projection.ReasonReferenceNotFound
