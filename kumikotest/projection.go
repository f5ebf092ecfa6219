package kumikotest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Rows reads every row of tenant in a read table (an entity's, an inline
// projection's or a multi-stream projection's) and decodes each into T,
// whose json tags name the table's columns ("month", "created_at"). The
// order is stable (by the rows' JSON form), not meaningful.
func Rows[T any](t testing.TB, a *App, table string, tenant uuid.UUID) []T {
	t.Helper()
	ctx := context.Background()
	rows, err := a.Pool.Query(ctx, "SELECT to_jsonb(r) FROM "+pgx.Identifier{table}.Sanitize()+" r WHERE r.tenant_id = $1 ORDER BY 1", tenant)
	if err != nil {
		t.Fatalf("kumikotest: rows of %s: %v", table, err)
	}
	raws, err := pgx.CollectRows(rows, pgx.RowTo[json.RawMessage])
	if err != nil {
		t.Fatalf("kumikotest: rows of %s: %v", table, err)
	}
	out := make([]T, len(raws))
	for i, raw := range raws {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			t.Fatalf("kumikotest: row of %s into %T: %v", table, out[i], err)
		}
	}
	return out
}
