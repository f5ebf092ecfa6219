package http_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	khttp "github.com/kumiko-go/kumiko/http"
)

// framingServer serves e's handler over khttp.StrictFraming; with
// byteReads the connections underneath hand out one byte per read, so
// every boundary of the framing falls between two reads.
func framingServer(t *testing.T, e *env, byteReads bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(e.s.Handler())
	ln := srv.Listener
	if byteReads {
		ln = byteListener{ln}
	}
	srv.Listener = khttp.StrictFraming(ln)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

type byteListener struct{ net.Listener }

func (l byteListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return byteConn{c}, nil
}

type byteConn struct{ net.Conn }

func (c byteConn) Read(p []byte) (int, error) { return c.Conn.Read(p[:min(len(p), 1)]) }

// rawExchange writes raw on one connection to srv at once and reads the
// answers until the server closes it; it fails the test unless the server
// closes it in time (closed false: the connection is still open after the
// answers expected).
func rawExchange(t *testing.T, srv *httptest.Server, raw string, expected int) (statuses []int, closed bool) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, raw)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(sseWait)))
	br := bufio.NewReader(conn)
	for {
		if len(statuses) == expected {
			// More than expected, or the end of the connection?
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(500*time.Millisecond)))
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				require.Len(t, statuses, expected, "the server neither answered nor closed the connection")
				return statuses, false
			}
			// ReadResponse calls an end before a status line unexpected.
			require.ErrorIs(t, err, io.ErrUnexpectedEOF, "the connection ends between answers (after %v)", statuses)
			return statuses, true
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		statuses = append(statuses, res.StatusCode)
	}
}

// rawWrite is a POST /api/write head with the token and extra header lines.
func rawWrite(tok, headers string) string {
	return "POST /api/write HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok +
		"\r\nContent-Type: application/json\r\n" + headers
}

func createBody(title string) string {
	return fmt.Sprintf(`{"type":"task.create","payload":{"title":%q}}`, title)
}

func chunked(body string) string {
	return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
}

// A request with both Content-Length and Transfer-Encoding is answered 400
// and its connection closed: neither it nor the request pipelined after it
// runs; requests before it on the connection are answered. Two different
// Content-Length values are refused the same way.
func TestFramingRefusesContentLengthWithTransferEncoding(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	good := createBody("good")
	next := rawWrite(alice, fmt.Sprintf("Content-Length: %d\r\n\r\n", len(good))) + good
	smuggled := chunked(createBody("smuggled"))
	for _, byteReads := range []bool{false, true} {
		srv := framingServer(t, e, byteReads)
		cases := map[string]string{
			"cl then te": rawWrite(alice, fmt.Sprintf("Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n", len(smuggled))) + smuggled,
			"te then cl": rawWrite(alice, "transfer-encoding: chunked\r\nX-Other: a\r\n"+
				fmt.Sprintf("CONTENT-LENGTH: %d\r\n\r\n", len(smuggled))) + smuggled,
			"cl 0 with te": rawWrite(alice, "Content-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n") + smuggled,
			"http/1.0": strings.Replace(rawWrite(alice, fmt.Sprintf("Transfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n", len(smuggled))),
				"HTTP/1.1", "HTTP/1.0", 1) + smuggled,
			"two content lengths": rawWrite(alice, fmt.Sprintf("Content-Length: %d\r\nContent-Length: %d\r\n\r\n", len(good), len(good)+1)) + good,
		}
		for name, raw := range cases {
			before := e.events()
			statuses, closed := rawExchange(t, srv, raw+next, 1)
			require.Equal(t, []int{http.StatusBadRequest}, statuses, "%s (byte reads %v)", name, byteReads)
			require.True(t, closed, name)
			require.Equal(t, before, e.events(), "%s: nothing ran", name)

			// After a good request on the same connection: that one runs.
			statuses, closed = rawExchange(t, srv, next+raw+next, 2)
			require.Equal(t, []int{http.StatusOK, http.StatusBadRequest}, statuses, name)
			require.True(t, closed, name)
			require.Equal(t, before+1, e.events(), "%s: only the first request ran", name)
		}
	}
}

// Keep-alive and pipelining stay intact: bodies by length and by chunks,
// with extensions and trailers, whose bytes look like header lines, are
// followed to their ends, and every request on the connection runs.
func TestFramingKeepsPipelining(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	// A body that holds both header lines: it is no head.
	tricky := fmt.Sprintf(`{"type":"task.create","payload":{"title":%q}}`, "a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n")
	var raw strings.Builder
	const n = 6
	for i := range n {
		body := createBody(fmt.Sprint("t", i))
		switch i % 3 {
		case 0:
			raw.WriteString(rawWrite(alice, fmt.Sprintf("Content-Length: %d\r\n\r\n", len(tricky))) + tricky)
		case 1:
			half := len(body) / 2
			raw.WriteString(rawWrite(alice, "Transfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n") +
				fmt.Sprintf("%x;ext=1\r\n%s\r\n%X\r\n%s\r\n0\r\nX-T: Content-Length: 9\r\n\r\n", half, body[:half], len(body)-half, body[half:]))
		case 2:
			raw.WriteString("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Note: Transfer-Encoding: chunked\r\n\r\n")
		}
	}
	for _, byteReads := range []bool{false, true} {
		srv := framingServer(t, e, byteReads)
		before := e.events()
		statuses, closed := rawExchange(t, srv, raw.String(), n)
		require.False(t, closed, "the connection stays open")
		want := make([]int, n)
		for i := range want {
			want[i] = http.StatusOK
		}
		require.Equal(t, want, statuses)
		require.Equal(t, before+4, e.events())
	}
}

// A body in a content coding other than identity is answered 415
// unsupported_media_type (content_encoding), whether or not it is really
// encoded; identity, or none, is read as usual.
func TestContentEncodingRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := token(t, "alice", tenantA, "User")
	body := createBody("encoded")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(body))
	require.NoError(t, zw.Close())

	for name, r := range map[string]request{
		"gzip body":            {path: "/api/write", token: alice, body: bytes.NewReader(gz.Bytes()), header: map[string]string{"Content-Encoding": "gzip"}},
		"plain body, gzip tag": {path: "/api/write", token: alice, body: strings.NewReader(body), header: map[string]string{"Content-Encoding": "gzip"}},
		"a list":               {path: "/api/query", token: alice, body: strings.NewReader(`{"type":"task.list"}`), header: map[string]string{"Content-Encoding": "identity, br"}},
	} {
		res := e.do(r)
		requireProblem(t, res, http.StatusUnsupportedMediaType, "unsupported_media_type", "content_encoding")
		require.Equal(t, "identity", res.header.Get("Accept-Encoding"), name)
	}
	require.Zero(t, e.events())
	r := e.post("/api/write", alice, body, "Content-Encoding", "Identity")
	require.Equal(t, http.StatusOK, r.status, r.String())
	require.Equal(t, 1, e.events())
}

// The framing costs one pass over each head; a body by length is not
// looked at. "plain" reads the same bytes without it.
func BenchmarkStrictFraming(b *testing.B) {
	head := "POST /api/write HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer " + strings.Repeat("t", 200) +
		"\r\nContent-Type: application/json\r\nUser-Agent: bench\r\nAccept: */*\r\nContent-Length: 64\r\n\r\n"
	req := []byte(head + strings.Repeat("x", 64))
	for _, strict := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "strict"}[strict], func(b *testing.B) {
			srv, cli := net.Pipe()
			defer cli.Close()
			var ln net.Listener = &oneConn{c: srv}
			if strict {
				ln = khttp.StrictFraming(ln)
			}
			c, err := ln.Accept()
			require.NoError(b, err)
			defer c.Close()
			go func() {
				for {
					if _, err := cli.Write(req); err != nil {
						return
					}
				}
			}()
			buf := make([]byte, len(req))
			b.SetBytes(int64(len(req)))
			b.ResetTimer()
			for range b.N {
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// oneConn is a listener that accepts c once.
type oneConn struct{ c net.Conn }

func (l *oneConn) Accept() (net.Conn, error) { return l.c, nil }
func (l *oneConn) Close() error              { return nil }
func (l *oneConn) Addr() net.Addr            { return l.c.LocalAddr() }
