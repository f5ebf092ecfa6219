package e2e_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/consumer"
)

// The e2eapp's projection e2e-parts has four partitions and parks a note
// titled "poison". With a serve and two workers: the partitions are shared
// by the three processes, every other note is applied exactly once while
// the poison one is parked; `consumer parked` names it and `consumer
// skip-parked` lets its stream go on; a worker that stops hands its
// partitions over; `consumer reset --to beginning --truncate` applies
// every note again, once.
func TestPartitionedProjection(t *testing.T) {
	t.Parallel()
	reserve(t, 3)
	a := newE2EApp(t)
	srv := a.serve(t, "parts-s")
	w1, w2 := a.worker(t, "parts-w1"), a.worker(t, "parts-w2")
	tenant := uuid.New()
	writer := a.as(t, srv, tenant, "writer", "User")

	shards := func() []consumer.ShardStatus {
		var list []consumer.ShardStatus
		require.NoError(t, json.Unmarshal([]byte(a.cli(t, "consumer", "list", "--json").stdout), &list))
		var out []consumer.ShardStatus
		for _, s := range list {
			if s.Name == "e2e-parts" {
				out = append(out, s)
			}
		}
		return out
	}
	waitFor(t, 20*time.Second, "three processes own the four partitions", func() (bool, string) {
		owners := map[string]bool{}
		list := shards()
		for _, s := range list {
			owners[s.Owner] = true
		}
		return len(list) == 4 && len(owners) == 3, fmt.Sprint(list)
	})

	poison := ok[entity](writer.write("note.create", map[string]any{"title": "poison"}))
	for i := range 40 {
		ok[entity](writer.write("note.create", map[string]any{"title": fmt.Sprint("n", i)}))
	}
	waitFor(t, 60*time.Second, "every other note applied once", countIs(t, a.db, 40, "SELECT count(DISTINCT event_id) FROM e2e_parts"))
	require.Equal(t, 40, a.db.Count(t, "SELECT count(*) FROM e2e_parts"))
	waitFor(t, 30*time.Second, "the poison note's stream is parked", func() (bool, string) {
		out := a.cli(t, "consumer", "parked", "e2e-parts").stdout
		return strings.Contains(out, poison.ID.String()), out
	})
	for _, s := range shards() {
		require.NotEqual(t, consumer.StatusDead, s.Status, "no partition is dead")
	}
	a.cli(t, "consumer", "skip-parked", "e2e-parts", poison.ID.String())
	ok[entity](writer.write("note.create", map[string]any{"title": "wake"}))
	waitFor(t, 30*time.Second, "the stream is no longer parked", func() (bool, string) {
		out := a.cli(t, "consumer", "parked", "e2e-parts", "--json").stdout
		return strings.TrimSpace(out) == "[]", out
	})

	// A stopping worker hands its partitions to the others.
	w2.stop(shutdownTimeout)
	waitFor(t, 20*time.Second, "two processes own the partitions", func() (bool, string) {
		owners := map[string]bool{}
		for _, s := range shards() {
			owners[s.Owner] = true
		}
		return len(owners) == 2 && !owners["parts-w2"], fmt.Sprint(owners)
	})
	for i := range 20 {
		ok[entity](writer.write("note.create", map[string]any{"title": fmt.Sprint("m", i)}))
	}
	waitFor(t, 60*time.Second, "the notes after the stop applied once", countIs(t, a.db, 61, "SELECT count(*) FROM e2e_parts"))

	// A mid-log reset of a table-backed projection is refused; from the
	// beginning with the table truncated, every note is applied again once.
	r := a.tryCLI(t, "consumer", "reset", "e2e-parts", "--to", "5", "--truncate")
	require.NotZero(t, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout+r.stderr, "reset_unsafe")
	a.cli(t, "consumer", "reset", "e2e-parts", "--to", "beginning", "--truncate", "--by", "e2e-ops")
	waitFor(t, 60*time.Second, "every note applied again", countIs(t, a.db, 61, "SELECT count(DISTINCT event_id) FROM e2e_parts"))
	require.Equal(t, 61, a.db.Count(t, "SELECT count(*) FROM e2e_parts"), "once each")
	require.Equal(t, 1, a.db.Count(t, "SELECT count(*) FROM kumiko_consumer_audit WHERE name = 'e2e-parts' AND actor = 'e2e-ops'"))

	for _, p := range []*proc{srv.proc, w1} {
		p.stop(shutdownTimeout)
	}
}
