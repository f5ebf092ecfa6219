package consumer

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/eventstore"
)

// A pass commits without waiting for the disk only when losing the commit
// loses no effect: it applied nothing and changed nothing but its place in
// the log.
func TestOnlyMovedPassesNeedNoFlush(t *testing.T) {
	t.Parallel()
	before := shard{cursor: 10, status: StatusIdle, parked: []string{"a"}}
	moved := before
	moved.cursor, moved.gapHorizon = 20, 25
	require.True(t, moved.onlyMoved(before, PassResult{}))

	for name, tc := range map[string]struct {
		sh  func(shard) shard
		res PassResult
	}{
		"applied":       {res: PassResult{applied: []eventstore.Event{{ID: 11}}}},
		"failed":        {res: PassResult{failures: 1, Failed: errors.New("x")}},
		"status":        {sh: func(s shard) shard { s.status = StatusDead; return s }},
		"attempts":      {sh: func(s shard) shard { s.attempts = 1; return s }},
		"parked":        {sh: func(s shard) shard { s.parked = []string{"a", "b"}; return s }},
		"operator asks": {sh: func(s shard) shard { return s }},
	} {
		sh, b := moved, before
		if tc.sh != nil {
			sh = tc.sh(sh)
		}
		if name == "operator asks" {
			b.actions = true
		}
		require.False(t, sh.onlyMoved(b, tc.res), name)
	}
}
