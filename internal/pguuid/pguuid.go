// Package pguuid lets pgx encode github.com/google/uuid's UUID the way it
// encodes its own: pgx otherwise sees only the driver.Valuer of a
// uuid.UUID, tries the binary format, fails with an error it builds and
// throws away, and sends the UUID's text (about 2.8 µs and 19 allocations
// per argument instead of 0.1 µs and one). Projections and handlers pass
// uuid.UUID as arguments on every event, so the framework's pools register
// this on every connection.
package pguuid

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Register makes m encode uuid.UUID as pgtype.UUID: binary for a uuid
// parameter, the UUID's text for any other (as before). Register before m
// plans its first encoding: m remembers the plans it made.
func Register(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrap}, m.TryWrapEncodePlanFuncs...)
}

// AfterConnect registers on a new connection: a pgxpool.Config's
// AfterConnect hook.
func AfterConnect(_ context.Context, conn *pgx.Conn) error {
	Register(conn.TypeMap())
	return nil
}

func tryWrap(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	if u, ok := value.(uuid.UUID); ok {
		return &wrapPlan{}, pgtype.UUID{Bytes: u, Valid: true}, true
	}
	return nil, nil, false
}

// wrapPlan hands a uuid.UUID on as a pgtype.UUID.
type wrapPlan struct{ next pgtype.EncodePlan }

func (p *wrapPlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *wrapPlan) Encode(value any, buf []byte) ([]byte, error) {
	return p.next.Encode(pgtype.UUID{Bytes: value.(uuid.UUID), Valid: true}, buf)
}
