package kumikotest

import (
	"context"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// ProxyMode is what a Proxy does with a new connection.
type ProxyMode int

const (
	// ProxyForward relays bytes both ways to the target: the default.
	ProxyForward ProxyMode = iota
	// ProxyHangUp accepts a connection and closes it at once, as a server
	// that goes away before it says anything.
	ProxyHangUp
	// ProxyGarbage accepts a connection, answers it with bytes that are no
	// valid PostgreSQL or Redis reply, and closes it.
	ProxyGarbage
)

// proxyGarbage is what ProxyGarbage answers.
const proxyGarbage = "HTTP/1.1 400 Bad Request\r\n\r\n\x00\xff\xfe garbage"

// Proxy is a TCP proxy run inside the test process between the code under
// test and a server (PostgreSQL, Redis, …), so a test can take the server
// away from that code alone: cut the open connections mid-transaction
// (Cut), make new connections fail (SetMode) or be refused (Close), and
// bring it back — without stopping or reconfiguring the shared server. It is
// safe for concurrent use and closes when the test ends.
type Proxy struct {
	ln     net.Listener
	target string
	// ctx is the test's: dialling the target stops when the test ends.
	ctx context.Context
	wg  sync.WaitGroup

	mu     sync.Mutex
	mode   ProxyMode
	conns  map[net.Conn]struct{}
	closed bool
}

// NewProxy listens on a free port of 127.0.0.1 and relays every connection
// to target: host:port, or the host of a URL (postgres://…, redis://…). It
// fails the test when it cannot listen or target does not parse.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	if strings.Contains(target, "://") {
		u, err := url.Parse(target)
		if err != nil {
			t.Fatalf("kumikotest: proxy target: %v", err)
		}
		target = u.Host
	}
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("kumikotest: proxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target, ctx: t.Context(), conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.serve)
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL returns serverURL (postgres://…, redis://…) with its host and port
// replaced by the proxy's, so a client built from it goes through the proxy.
// It panics when serverURL does not parse.
func (p *Proxy) URL(serverURL string) string {
	u, err := url.Parse(serverURL)
	if err != nil {
		panic("kumikotest: Proxy.URL: " + err.Error())
	}
	u.Host = p.Addr()
	return u.String()
}

// SetMode decides what happens to connections accepted from now on; open
// connections keep relaying until Cut.
func (p *Proxy) SetMode(m ProxyMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = m
}

// Cut closes every open connection, both towards the client and towards the
// target, and returns how many client connections it cut. To the client this
// is a connection lost mid-statement; to the server, a client that vanished
// (an open transaction rolls back). New connections are not affected.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
		n++
	}
	return n / 2 // a client and its target connection
}

// Close stops listening, so new connections are refused, cuts the open
// ones and waits for the relaying goroutines. The port is free afterwards;
// another listener could take it. Close is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		mode := p.mode
		p.mu.Unlock()
		switch mode {
		case ProxyHangUp:
			_ = c.Close()
		case ProxyGarbage:
			p.wg.Go(func() {
				defer func() { _ = c.Close() }()
				_, _ = c.Write([]byte(proxyGarbage))
			})
		default:
			p.wg.Go(func() { p.relay(c) })
		}
	}
}

// relay connects c to the target and copies both ways until either side
// ends, then closes both.
func (p *Proxy) relay(c net.Conn) {
	up, err := (&net.Dialer{}).DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	if !p.track(c, up) {
		_ = c.Close()
		_ = up.Close()
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src) // ends with either connection
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	p.untrack(c, up)
	_ = c.Close()
	_ = up.Close()
	<-done
}

// track registers an open pair; false when the proxy closed meanwhile.
func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.conns, c)
	}
}
