package http_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/kumikotest"
)

// BenchmarkKeyedCreate measures one keyed create through a server on a real
// port (client and server in this process), for -benchmem and profiles.
func BenchmarkKeyedCreate(b *testing.B) {
	app := kumikotest.NewApp(b, []*feature.Feature{probe})
	s, err := khttp.NewServer(khttp.Config{JWTSecret: secret, Idempotency: newMemStore()}, app.Executor, app.Store)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	tok, err := khttp.IssueToken(secret, "alice", tenantA.String(), []string{"User"}, 3600e9)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		key := "bench-" + strconv.Itoa(i)
		r, err := send(srv, with(post("/api/write", tok, `{"type":"member.create","payload":{"email":"`+key+`@example.com"}}`), "Idempotency-Key", key))
		if err != nil || r.status != http.StatusOK {
			b.Fatalf("%v %s", err, r)
		}
	}
}
