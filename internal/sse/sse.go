// Package sse writes server-sent event streams for the HTTP API and the
// ops console: every write and flush has a deadline of its own, so a
// client that stops reading cannot hold a handler for long.
package sse

import (
	"errors"
	"net/http"
	"time"
)

// WriteTimeout bounds one write or flush to a client: a client that
// accepts nothing for that long is cut off.
const WriteTimeout = 30 * time.Second

// Writer writes one response's stream.
type Writer struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// Start answers 200 with the event-stream headers (Content-Type,
// X-Accel-Buffering: no, and cacheControl) and returns the stream's
// writer; the caller flushes the headers and calls Release when the stream
// ends. A stream outlives the server's read and write timeouts: Start
// clears them (each write sets its own deadline), and a client that goes
// away is still noticed by the server's read of the connection.
func Start(w http.ResponseWriter, cacheControl string) *Writer {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", cacheControl)
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	return &Writer{w: w, rc: rc}
}

// Release clears the write deadline: the connection may serve more
// requests after the stream.
func (w *Writer) Release() { _ = w.rc.SetWriteDeadline(time.Time{}) }

// Write writes frame (one or more complete frames, or a comment).
func (w *Writer) Write(frame []byte) error {
	if err := w.deadline(); err != nil {
		return err
	}
	_, err := w.w.Write(frame)
	return err
}

// Flush sends what was written.
func (w *Writer) Flush() error {
	if err := w.deadline(); err != nil {
		return err
	}
	return w.rc.Flush()
}

// End writes a last frame and flushes; the stream ends after it either
// way.
func (w *Writer) End(frame []byte) error {
	if err := w.Write(frame); err == nil {
		_ = w.Flush()
	}
	return nil
}

func (w *Writer) deadline() error {
	if err := w.rc.SetWriteDeadline(time.Now().Add(WriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}
