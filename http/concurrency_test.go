package http_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// 32 clients update the same task from the same version at once: exactly one
// wins, every other one gets 409 version_conflict, none a 500.
func TestConcurrentUpdatesOneWins(t *testing.T) {
	t.Parallel()
	// Fewer pool connections than racing clients: losers must be told
	// without a second connection while they hold one.
	const n = 32
	e := newEnvConns(t, 8)
	alice := token(t, "alice", tenantA, "User")
	id := e.create(alice, "contended")["id"].(string)

	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		replies = make([]reply, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			replies[i], errs[i] = send(e.srv, post("/api/write", alice,
				fmt.Sprintf(`{"type":"task.update","payload":{"id":%q,"version":1,"changes":{"title":"writer %d"}}}`, id, i)))
		}()
	}
	close(start)
	wg.Wait()

	won, lost := 0, 0
	var winner string
	for i, r := range replies {
		require.NoError(t, errs[i])
		switch r.status {
		case 200:
			won++
			winner = r.data(t)["title"].(string)
		case 409:
			requireProblem(t, r, 409, "version_conflict", "event_version_conflict")
			lost++
		default:
			t.Fatalf("request %d: %s", i, r)
		}
	}
	require.Equal(t, 1, won)
	require.Equal(t, n-1, lost)
	require.True(t, strings.HasPrefix(winner, "writer "))
	require.Equal(t, 2, e.events(), "the create and the one winning update")
	detail := e.post("/api/query", alice, fmt.Sprintf(`{"type":"task.detail","payload":{"id":%q}}`, id)).data(t)
	require.Equal(t, winner, detail["title"])
	require.Equal(t, float64(2), detail["version"])
}
