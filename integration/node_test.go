package integration_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/pipeline"
)

// nodeClient is a copy of samples/node-client with its pinned packages
// installed (npm ci), in a directory of the test's.
func nodeClient(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "%s is needed for the Node.js client tests: install Node.js 18 or later (Debian: apt-get install nodejs npm)", tool)
	}
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "consume.js", "publish.js"} {
		raw, err := os.ReadFile(filepath.Join("..", "samples", "node-client", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), raw, 0o600))
	}
	c, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(c, "npm", "ci", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "npm ci in a copy of samples/node-client: %s", out)
	return dir
}

// node runs one of the client's programs with env and returns its output.
func node(t *testing.T, dir, program string, env ...string) string {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(c, "node", program)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "node %s: %s", program, out)
	return string(out)
}

// The Node.js client (amqplib) in samples/node-client both ways: its
// messages — the version header a number (which amqplib sends as a byte),
// a string or missing, the message id no UUID — are handled by a kumiko
// app's handlers; and it reads a kumiko app's messages from a queue of its
// own.
func TestNodeClient(t *testing.T) {
	t.Parallel()
	dir := nodeClient(t)
	br := newBroker(t, rabbitURL())
	brokerEnv := []string{"RABBITMQ_URL=" + rabbitURL(), "EXCHANGE=" + br.exchange}

	t.Run("publishes to kumiko", func(t *testing.T) {
		rc := &receiver{calls: map[string]int{}}
		billing := receiverApp(t, billingFeature(rc))
		rec := newRecorder(t)
		instanceWith(t, billing, integration.Config{Transport: br.transport(t, "billing", 0), TracerProvider: rec.tp})
		for _, as := range []string{"number", "string", "none"} {
			id := node(t, dir, "publish.js", append(brokerEnv, "TYPE=order.shipped", "TENANT="+tenantA.String(),
				"ID=node-"+as, "VERSION_AS="+as, `BODY={"orderId":"node-`+as+`"}`)...)
			require.Equal(t, "node-"+as, strings.TrimSpace(id))
		}
		waitRows(t, billing, 6, "SELECT count(*) FROM received")
		for _, as := range []string{"number", "string", "none"} {
			require.Equal(t, 2, billing.Count(t, "SELECT count(*) FROM received WHERE message_id = $1 AND order_id = $2 AND tenant_id = $3",
				integration.MessageID("node-"+as), "node-"+as, tenantA), "both handlers, once, in the tenant (version header %s)", as)
		}
		// Sent again (the same id), it is delivered and both handlers skip
		// it: their inbox rows say they had it.
		node(t, dir, "publish.js", append(brokerEnv, "TYPE=order.shipped", "TENANT="+tenantA.String(), "ID=node-number", `BODY={"orderId":"node-number"}`)...)
		id := integration.MessageID("node-number").String()
		skipped := func(handler string) bool {
			for _, sp := range rec.named("integration.handle order.shipped " + handler) {
				if attr(sp, "messaging.message.id").AsString() == id && attr(sp, "kumiko.skipped").AsBool() {
					return true
				}
			}
			return false
		}
		require.Eventually(t, func() bool { return skipped("invoice") && skipped("notify") }, 30*time.Second, 20*time.Millisecond,
			"the resent message reaches both handlers, which skip it")
		require.Equal(t, 6, billing.Count(t, "SELECT count(*) FROM received"))
	})

	t.Run("consumes from kumiko", func(t *testing.T) {
		c, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		cmd := exec.CommandContext(c, "node", "consume.js")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), append(brokerEnv, "QUEUE="+br.prefix+"-node", "TYPES=order.shipped,order.cancelled", "COUNT=2")...)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		stderr, err := cmd.StderrPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		ready, err := bufio.NewReader(stderr).ReadString('\n')
		require.NoError(t, err, "consume.js did not get ready")
		require.Equal(t, "ready\n", ready)

		orders := publisher(t, br.transport(t, "orders", 0))
		publish(t, orders, alice, "order.shipped", "alice-1", false)
		publish(t, orders, bob, "order.cancelled", "bob-1", false)
		out, err := io.ReadAll(stdout)
		require.NoError(t, err)
		require.NoError(t, cmd.Wait())

		type line struct {
			ID, Type, Tenant, User, Key string
			Version                     int
			Payload                     map[string]any
		}
		var got []line
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var x line
			require.NoError(t, json.Unmarshal([]byte(l), &x), l)
			got = append(got, x)
		}
		require.Len(t, got, 2)
		ids := map[string]string{}
		rows, err := orders.Pool.Query(ctx, `SELECT aggregate_id::text, type FROM kumiko_events WHERE aggregate_type = $1`, pipeline.MessageStream)
		require.NoError(t, err)
		for rows.Next() {
			var id, typ string
			require.NoError(t, rows.Scan(&id, &typ))
			ids[typ] = id
		}
		require.NoError(t, rows.Err())
		require.Equal(t, line{ID: ids["order.shipped"], Type: "order.shipped", Tenant: tenantA.String(), User: "alice", Version: 1,
			Payload: map[string]any{"orderId": "alice-1"}}, got[0])
		require.Equal(t, line{ID: ids["order.cancelled"], Type: "order.cancelled", Tenant: tenantB.String(), User: "bob", Version: 1,
			Payload: map[string]any{"orderId": "bob-1"}}, got[1])
	})
}
