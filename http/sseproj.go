package http

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/pipeline"
)

const (
	// rowSettledPoll is how often a channel of a multi-stream projection
	// looks at the projection's cursor while an event it waits for is not
	// applied yet; it does not look while nothing is waiting.
	rowSettledPoll = 100 * time.Millisecond
	// rowReadChunk is the most rows one read by id asks for.
	rowReadChunk = 200
)

// The event names of a projection channel's frames.
const (
	rowUpsert = "upsert"
	rowDelete = "delete"
	rowReset  = "reset"
	// noID marks a frame without an id line.
	noID = -1
)

// GET /api/projections/:name/events: the row changes of one projection of
// the caller's tenant as Server-Sent Events — `upsert` with the row as the
// projection query answers it, `delete` with the row's key — each with the
// id of the newest event it reflects, once the projection reflects it.
//
// A client that applies the frames to its rows in order ends with the rows
// a fresh projection query answers. Without a resume point the stream
// starts with a `reset` frame and every row; the id comes with the last
// frame of that snapshot. With one (Last-Event-ID, else ?after=) an
// entity's table, keyed by stream id, gets the current row (or its delete)
// of each stream with events after that id, in the order of their last
// events; any other table gets the snapshot again, as its rows cannot be
// traced to events.
func (s *Server) projectionEvents(c echo.Context) error {
	u := userOf(c)
	if !u.Authenticated {
		return unauthenticated("", "sign in to follow a projection", nil)
	}
	feed, err := s.d.RowFeed(c.Param("name"))
	if err != nil {
		return pipeline.AsError(err)
	}
	if !feed.Read().Allows(u) {
		return newAPIError(pipeline.CodeAccessDenied, "", "you may not follow the projection "+feed.Name())
	}
	after, resume, err := sseResumePoint(c)
	if err != nil {
		return err
	}
	cl, position, err := s.hub.subscribeEvents(c.Request().Context(), u, feed.Changes)
	if err != nil {
		return subscribeFailed(err)
	}
	defer s.hub.unsubscribe(cl)

	rs := &rowStream{s: s, feed: feed, cl: cl, ctx: c.Request().Context()}
	// Everything that can fail before the answer starts is read first, so
	// an outage is a 503, not an empty stream.
	var first func() error
	if resume && feed.Keyed() {
		streams, err := rs.changedStreams(after, position)
		if err != nil {
			return pipeline.AsError(err)
		}
		rs.last = after
		first = func() error { return rs.sendStreams(streams) }
	} else {
		// A multi-stream projection may not have applied every event up
		// to position yet: its snapshot is then followed by a diff once
		// it has (the live loop waits for that as for any event).
		applied, err := feed.Settled(rs.ctx)
		if err != nil {
			return pipeline.AsError(err)
		}
		rows, err := feed.Rows(rs.ctx, u.TenantID, u)
		if err != nil {
			return pipeline.AsError(err)
		}
		if applied < position {
			rs.pending = position
		}
		first = func() error { return rs.sendSnapshot(rows, position) }
	}

	w := startStream(c)
	defer w.Release()
	rs.st = &sseStream{c: c, cl: cl, w: w}
	if exp, ok := tokenExpiryOf(c); ok {
		t := time.NewTimer(time.Until(exp))
		defer t.Stop()
		rs.st.expired = t.C
	}
	if err := first(); err != nil {
		return nil // the client is gone, or the read failed (logged): it resumes
	}
	if err := w.Flush(); err != nil {
		return nil
	}
	return rs.live()
}

// rowStream is one open projection channel.
type rowStream struct {
	s    *Server
	feed *pipeline.RowFeed
	cl   *sseClient
	st   *sseStream
	ctx  context.Context
	// last is the id of the newest frame sent with an id (or the resume
	// point): ids never go down.
	last int64
	// rows are the rows the client holds by key, as sent, for a table
	// that is not keyed by stream (compared with each new read).
	rows map[string]string
	// pending is the newest event not yet reflected in what was sent, for
	// a table not keyed by stream; streams are the streams with such
	// events and the id of the newest, for a keyed one.
	pending int64
	streams map[uuid.UUID]int64
}

// changedStreams reads the events after `after` up to upTo that may
// change the rows and returns each stream's newest one.
func (rs *rowStream) changedStreams(after, upTo int64) (map[uuid.UUID]int64, error) {
	streams := map[uuid.UUID]int64{}
	for ev, err := range rs.s.store.ReadAll(rs.ctx, after, rs.feed.Filter(rs.cl.tenant)) {
		if err != nil {
			return nil, err
		}
		if ev.ID > upTo {
			break // the live feed brings the rest
		}
		if rs.feed.Changes(ev) {
			streams[ev.AggregateID] = ev.ID
		}
	}
	return streams, nil
}

// sendStreams sends the current row of each stream, or its delete, in the
// order of the streams' newest events, each with that event's id (or the
// last id sent, when higher).
func (rs *rowStream) sendStreams(streams map[uuid.UUID]int64) error {
	ids := slices.SortedFunc(maps.Keys(streams), func(a, b uuid.UUID) int { return cmp.Compare(streams[a], streams[b]) })
	for chunk := range slices.Chunk(ids, rowReadChunk) {
		rows, err := rs.feed.RowsByID(rs.ctx, rs.cl.tenant, rs.cl.user, chunk)
		if err != nil {
			rs.readFailed(err)
			return err
		}
		byID := make(map[string]map[string]any, len(rows))
		for _, r := range rows {
			id, _ := r["id"].(string)
			byID[id] = r
		}
		for _, id := range chunk {
			frameID := max(streams[id], rs.last)
			var err error
			if row, ok := byID[id.String()]; ok {
				err = rs.send(frameID, rowUpsert, row)
			} else {
				err = rs.send(frameID, rowDelete, rs.feed.KeyOf(id))
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// sendSnapshot sends a reset frame and every row; the last frame carries
// mark, the id the rows reflect at least. A table not keyed by stream keeps
// the rows to compare with later reads.
func (rs *rowStream) sendSnapshot(rows []map[string]any, mark int64) error {
	mark = max(mark, rs.last)
	if !rs.feed.Keyed() {
		rs.rows = make(map[string]string, len(rows))
	}
	resetID := int64(noID)
	if len(rows) == 0 {
		resetID = mark
	}
	if err := rs.send(resetID, rowReset, map[string]any{}); err != nil {
		return err
	}
	for i, row := range rows {
		id := int64(noID)
		if i == len(rows)-1 {
			id = mark
		}
		if rs.rows != nil {
			raw, _ := json.Marshal(row)
			rs.rows[rowKey(rs.feed.Key(row))] = string(raw)
		}
		if err := rs.send(id, rowUpsert, row); err != nil {
			return err
		}
	}
	rs.last = mark
	return nil
}

// live sends the changes of the events the hub brings, a burst at a time,
// and heartbeats, until the client goes, the hub drops it or its token
// expires.
func (rs *rowStream) live() error {
	st, cl := rs.st, rs.cl
	beat := time.NewTicker(rs.s.cfg.SSEHeartbeat)
	defer beat.Stop()
	var wait *time.Timer // a multi-stream projection has not applied pending yet
	if rs.pending != 0 {
		wait = time.NewTimer(0) // the snapshot's own: checked at once
	}
	defer func() {
		if wait != nil {
			wait.Stop()
		}
	}()
	for {
		var waitC <-chan time.Time
		if wait != nil {
			waitC = wait.C
		}
		select {
		case <-cl.gone:
			return rs.s.streamEnded(st)
		default:
		}
		select {
		case <-rs.ctx.Done():
			return nil
		case <-cl.gone:
			return rs.s.streamEnded(st)
		case <-st.expired:
			return st.w.End(tokenExpiredFrame)
		case <-beat.C:
			if err := st.w.Write(heartbeatFrame); err != nil {
				return nil
			}
			if err := st.w.Flush(); err != nil {
				return nil
			}
		case <-waitC:
			wait = nil
		case f := <-cl.frames:
			rs.note(f.ev)
			for len(cl.frames) > 0 { // the rest of the burst
				rs.note((<-cl.frames).ev)
			}
		}
		if wait != nil {
			continue
		}
		settled, err := rs.sendChanges()
		if err != nil {
			return nil // the client is gone, or a read failed (logged): it resumes
		}
		if !settled {
			wait = time.NewTimer(rowSettledPoll)
		}
	}
}

// note records that ev may have changed rows.
func (rs *rowStream) note(ev eventstore.Event) {
	if rs.feed.Keyed() {
		if rs.streams == nil {
			rs.streams = map[uuid.UUID]int64{}
		}
		rs.streams[ev.AggregateID] = ev.ID
		return
	}
	rs.pending = max(rs.pending, ev.ID)
}

// sendChanges sends what the noted events changed and flushes; false when
// the projection has not applied them yet (a multi-stream projection
// behind them): nothing is sent then.
func (rs *rowStream) sendChanges() (settled bool, err error) {
	switch {
	case rs.feed.Keyed():
		if len(rs.streams) == 0 {
			return true, nil
		}
		streams := rs.streams
		rs.streams = nil
		if err := rs.sendStreams(streams); err != nil {
			return true, err
		}
	default:
		if rs.pending == 0 {
			return true, nil
		}
		upTo, err := rs.feed.Settled(rs.ctx)
		if err != nil {
			rs.readFailed(err)
			return true, err
		}
		if upTo < rs.pending {
			return false, nil
		}
		if err := rs.sendDiff(); err != nil {
			return true, err
		}
	}
	return true, rs.st.w.Flush()
}

// sendDiff reads the rows again and sends what differs from the rows the
// client holds: deletes, then upserts, each with the pending event's id.
func (rs *rowStream) sendDiff() error {
	id := max(rs.pending, rs.last)
	rs.pending = 0
	rows, err := rs.feed.Rows(rs.ctx, rs.cl.tenant, rs.cl.user)
	if err != nil {
		rs.readFailed(err)
		return err
	}
	now := make(map[string]string, len(rows))
	keys := make(map[string]map[string]any, len(rows))
	for _, row := range rows {
		raw, _ := json.Marshal(row)
		k := rs.feed.Key(row)
		now[rowKey(k)] = string(raw)
		keys[rowKey(k)] = k
	}
	for _, k := range slices.Sorted(maps.Keys(rs.rows)) {
		if _, ok := now[k]; !ok {
			if err := rs.sendRaw(id, rowDelete, []byte(k)); err != nil {
				return err
			}
		}
	}
	for _, row := range rows {
		k := rowKey(rs.feed.Key(row))
		if rs.rows[k] == now[k] {
			continue
		}
		if err := rs.sendRaw(id, rowUpsert, []byte(now[k])); err != nil {
			return err
		}
	}
	rs.rows = now
	return nil
}

// send writes one frame with data as JSON; noID writes no id line.
func (rs *rowStream) send(id int64, event string, data any) error {
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	return rs.sendRaw(id, event, raw)
}

func (rs *rowStream) sendRaw(id int64, event string, data []byte) error {
	b := make([]byte, 0, len(data)+40)
	if id != noID {
		b = append(b, "id: "...)
		b = strconv.AppendInt(b, id, 10)
		b = append(b, '\n')
		rs.last = max(rs.last, id)
	}
	b = append(b, "event: "...)
	b = append(b, event...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	return rs.st.w.Write(b)
}

// readFailed logs a failed read of a stream that has started: the stream
// ends, and the client resumes from the last id it got.
func (rs *rowStream) readFailed(err error) {
	if rs.ctx.Err() == nil {
		infoOf(rs.st.c).log.Error("projection stream: read failed", "projection", rs.feed.Name(), "err", err)
	}
}

// rowKey is a row's key as a string, to compare rows by key.
func rowKey(key map[string]any) string {
	b, _ := json.Marshal(key) // map keys marshal sorted
	return string(b)
}
