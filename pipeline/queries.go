package pipeline

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// queries holds the statements on the executor's own table, qualified with
// the store's schema: the recorded idempotency keys (see migrations/). The
// read side's are internal/projection's.
type queries struct {
	// Idempotency keys.
	recordKey, keyHash, pruneKeys string
}

func newQueries(schema string) queries {
	r := strings.NewReplacer(
		"{keys}", pgx.Identifier{schema, "kumiko_idempotency_keys"}.Sanitize(),
	)
	return queries{
		recordKey: r.Replace(`INSERT INTO {keys} (tenant_id, user_id, key, request_hash) VALUES ($1, $2, $3, $4)`),
		keyHash:   r.Replace(`SELECT request_hash FROM {keys} WHERE tenant_id = $1 AND user_id = $2 AND key = $3`),
		// One chunk, found through the index on created_at.
		pruneKeys: r.Replace(fmt.Sprintf(`DELETE FROM {keys} WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM {keys} WHERE created_at < $1 LIMIT %d))`, pruneKeysChunk)),
	}
}
