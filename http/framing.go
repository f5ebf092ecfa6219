package http

import (
	"bytes"
	"net"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/kumiko-go/kumiko/kumikotype"
)

// StrictFraming wraps ln so that its connections refuse a request whose
// head carries both Content-Length and Transfer-Encoding (RFC 9112 §6.1):
// net/http would drop the Content-Length, read a chunked body and go on
// with the next request on the connection, while a proxy in front that
// trusts the Content-Length sees other requests than the server runs — a
// request smuggling opening. Such a request is answered 400 Bad Request
// (by net/http, in turn with the requests before it) and its connection is
// closed: neither it nor anything pipelined after it runs. The handler
// cannot do this itself, as net/http deletes the Content-Length before it
// sees the request.
//
// Each connection follows the framing of its requests as net/http reads
// them — request line, header lines, then a body by Content-Length or
// chunks — in the bytes net/http reads anyway: nothing is copied or held
// back, a body by Content-Length is skipped without being looked at, and
// a head costs one pass over its bytes. A request net/http refuses for its
// framing (a bad Content-Length or chunk line) ends its connection; the
// wrapper then stops looking. An HTTP/1.0 request's Transfer-Encoding does
// not frame its body (net/http ignores it), but it is still refused next
// to a Content-Length.
func StrictFraming(ln net.Listener) net.Listener { return strictListener{ln} }

type strictListener struct{ net.Listener }

func (l strictListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framedConn{Conn: c}, nil
}

// framedConn is a connection whose reads pass through a framer.
type framedConn struct {
	net.Conn
	f framer
}

func (c *framedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.f.scan(p[:n])
	}
	return n, err
}

// CloseWrite half-closes the connection when it can: net/http does so
// before it closes a connection whose client may still be sending.
func (c *framedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// The states of a framer: where in a request the next byte is.
const (
	fsRequestLine  = iota // the request line
	fsLineStart           // the first byte of a header line, or the blank line
	fsName                // a header name, up to its colon
	fsLength              // a Content-Length value
	fsSkipLine            // the rest of a header line that does not matter
	fsBody                // remain bytes of a body by Content-Length
	fsChunkSize           // a chunk-size line
	fsChunkExt            // the extensions of a chunk-size line
	fsChunkData           // remain bytes of a chunk, then its CRLF
	fsTrailerStart        // the first byte of a trailer line, or the blank line
	fsTrailerLine         // the rest of a trailer line
	fsPassThrough         // lost the framing (net/http refuses it): look no more
)

const (
	maxNameSeen = len("transfer-encoding") // the longest name that matters
	// http10 is "HTTP/1.0" as the last 8 bytes of a request line.
	http10 = uint64('H')<<56 | uint64('T')<<48 | uint64('T')<<40 | uint64('P')<<32 |
		uint64('/')<<24 | uint64('1')<<16 | uint64('.')<<8 | uint64('0')
	maxBodyLength = 1<<62 - 1
)

// framer follows the framing of the requests on one connection.
type framer struct {
	state  uint8
	name   [maxNameSeen]byte
	nameN  int // bytes of the header name so far; past maxNameSeen: other
	tail   uint64
	length int64 // the Content-Length (or chunk size) being read
	remain int64
	digits bool // length has a digit
	http10 bool // the request is HTTP/1.0: Transfer-Encoding does not frame
	cl, te bool // the head has a Content-Length, a Transfer-Encoding
	bad    bool // the Content-Length is not a number
}

// scan follows p, the next bytes of the connection. On the colon of the
// second of Content-Length and Transfer-Encoding in one head it overwrites
// that colon, so net/http reads a malformed header line: it answers 400
// and closes the connection without running the request.
func (f *framer) scan(p []byte) {
	for i := 0; i < len(p); i++ {
		b := p[i]
		switch f.state {
		case fsRequestLine:
			switch b {
			case '\n':
				f.http10 = f.tail == http10
				f.state = fsLineStart
			case '\r':
			default:
				f.tail = f.tail<<8 | uint64(b)
			}
		case fsLineStart:
			switch b {
			case '\r':
			case '\n':
				f.endHead()
			case ' ', '\t': // a continued line (net/http joins it)
				f.state = fsSkipLine
			default:
				f.name[0], f.nameN, f.state = lower(b), 1, fsName
			}
		case fsName:
			switch b {
			case ':':
				f.header(p, i)
			case '\n':
				f.state = fsLineStart // no colon: net/http refuses the head
			default:
				if f.nameN < maxNameSeen {
					f.name[f.nameN] = lower(b)
				}
				f.nameN++
			}
		case fsLength:
			switch {
			case b == '\n':
				f.state = fsLineStart
			case b >= '0' && b <= '9':
				f.length, f.digits = f.length*10+int64(b-'0'), true
				if f.length > maxBodyLength {
					f.bad = true
				}
			case b == ' ' || b == '\t' || b == '\r':
			default:
				f.bad = true
			}
		case fsSkipLine:
			j := bytes.IndexByte(p[i:], '\n')
			if j < 0 {
				return
			}
			i += j
			f.state = fsLineStart
		case fsBody, fsChunkData:
			n := min(int64(len(p)-i), f.remain)
			i += int(n) - 1
			f.remain -= n
			if f.remain == 0 {
				f.endData()
			}
		case fsChunkSize, fsChunkExt:
			f.chunkLine(b)
		case fsTrailerStart:
			switch b {
			case '\r':
			case '\n':
				f.reset()
			default:
				f.state = fsTrailerLine
			}
		case fsTrailerLine:
			if b == '\n' {
				f.state = fsTrailerStart
			}
		case fsPassThrough:
			return
		}
	}
}

// header handles the colon at p[i] that ends a header name.
func (f *framer) header(p []byte, i int) {
	f.state = fsSkipLine
	if f.nameN > maxNameSeen {
		return
	}
	switch string(f.name[:f.nameN]) {
	case "content-length":
		f.cl, f.state = true, fsLength
		f.length, f.digits = 0, false // a repeated one must be equal: net/http checks
	case "transfer-encoding":
		f.te = true
	default:
		return
	}
	if f.cl && f.te {
		p[i] = 0
		f.state = fsPassThrough
	}
}

// endHead starts the body the head announced, if any.
func (f *framer) endHead() {
	switch {
	case f.te && !f.http10:
		f.state, f.length, f.digits = fsChunkSize, 0, false
	case f.cl && (f.bad || !f.digits):
		f.state = fsPassThrough
	case f.cl && f.length > 0:
		f.state, f.remain = fsBody, f.length
	default:
		f.reset()
	}
}

// chunkLine reads a byte of a chunk-size line: hex digits, then optional
// whitespace and extensions.
func (f *framer) chunkLine(b byte) {
	switch {
	case b == '\n':
		switch {
		case !f.digits:
			f.state = fsPassThrough
		case f.length == 0:
			f.state = fsTrailerStart
		default:
			f.state, f.remain = fsChunkData, f.length+2 // and its CRLF
		}
	case f.state == fsChunkExt || b == '\r':
	case b == ';' || b == ' ' || b == '\t':
		f.state = fsChunkExt
	default:
		v, ok := unhex(b)
		if !ok || f.length > maxBodyLength>>4 {
			f.state = fsPassThrough
			return
		}
		f.length, f.digits = f.length<<4|int64(v), true
	}
}

// endData follows the end of a body by Content-Length or of a chunk.
func (f *framer) endData() {
	if f.state == fsBody {
		f.reset()
		return
	}
	f.state, f.length, f.digits = fsChunkSize, 0, false
}

// reset waits for the next request.
func (f *framer) reset() { *f = framer{} }

func lower(b byte) byte {
	if b >= 'A' && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

func unhex(b byte) (byte, bool) {
	switch {
	case b >= '0' && b <= '9':
		return b - '0', true
	case b >= 'a' && b <= 'f':
		return b - 'a' + 10, true
	case b >= 'A' && b <= 'F':
		return b - 'A' + 10, true
	}
	return 0, false
}

// headerContentEncoding names the content coding of a request body.
const headerContentEncoding = "Content-Encoding"

// refuseContentEncoding answers 415 unsupported_media_type (reason
// content_encoding, with Accept-Encoding: identity) to a request with a
// body in any content coding but identity: the API reads bodies as they
// come, so a gzip body would otherwise fail as invalid UTF-8, and a plain
// one labelled gzip would be read as if it were not labelled.
func (s *Server) refuseContentEncoding(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.ContentLength == 0 || identityOnly(r.Header.Values(headerContentEncoding)) {
			return next(c)
		}
		return newAPIError(codeUnsupportedMediaType, kumikotype.ReasonContentEncoding,
			"the request body must not be content-encoded (Content-Encoding: identity or none)")
	}
}

// identityOnly reports whether the Content-Encoding values name no coding
// but identity.
func identityOnly(values []string) bool {
	for _, v := range values {
		for coding := range strings.SplitSeq(v, ",") {
			if coding = strings.TrimSpace(coding); coding != "" && !strings.EqualFold(coding, "identity") {
				return false
			}
		}
	}
	return true
}
