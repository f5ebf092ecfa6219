package eventstore

import (
	"bytes"
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Personal data (docs/personal-data.md). A personal value is stored
// encrypted with its data subject's data key, AES-256-GCM, authenticated
// with where it is stored: the event's tenant, stream, version and type (a
// snapshot's tenant, stream and version) and the field's name and subject.
// A sealed value is a JSON string: sealedPrefix and the base64 of nonce and
// sealed text. The row records which fields are sealed and whose they are
// (the personal column: field → subject), and every read fetches the
// subjects' wrapped keys in the same statement (keysOfRow):
// once a subject's key row is deleted, no read can open its values, which
// read as null.

// sealedPrefix begins a sealed personal value.
const sealedPrefix = "kumiko:pd1:"

// ErrNoDataKey: an event or snapshot with personal fields was written to a
// store without a KeyProvider.
var ErrNoDataKey = errors.New("eventstore: personal fields need a data key: set Config.Keys (KUMIKO_DATA_KEY)")

// wrappedKey is a subject's data key as stored.
type wrappedKey struct {
	kek     string
	wrapped []byte
}

// rowField is a sealed field of a stored row and its subject, as the row's
// personal column has them.
type rowField struct{ field, subject []byte }

// rowFieldsOf decodes a row's personal column (field → subject), appending
// to dst.
func rowFieldsOf(personal []byte, dst []rowField) ([]rowField, error) {
	var buf [8]jsonMember
	if obj, ok := scanObject(personal, buf[:0]); ok {
		for _, m := range obj.members {
			if !m.plainName || !m.plainValue {
				ok = false
				break
			}
			dst = append(dst, rowField{field: personal[m.nameStart+1 : m.nameEnd-1], subject: personal[m.valueStart+1 : m.valueEnd-1]})
		}
		if ok {
			return dst, nil
		}
	}
	// Escapes, or not an object of strings: encoding/json decodes it, or
	// tells what is wrong with it.
	var fields map[string]string
	if err := json.Unmarshal(personal, &fields); err != nil {
		return nil, err
	}
	dst = dst[:0]
	for field, subject := range fields {
		dst = append(dst, rowField{[]byte(field), []byte(subject)})
	}
	return dst, nil
}

// rowKey is a subject's wrapped data key as a read answers it
// (keysOfRow), and its cipher once looked up.
type rowKey struct {
	subject, kek, wrapped []byte
	aead                  cipher.AEAD
	looked                bool
}

// rowKeysOf decodes what keysOfRow answers (subject → [kek id, hex of the
// wrapped key]; hex, since PostgreSQL's base64 breaks lines, which JSON
// escapes), appending to dst.
func rowKeysOf(raw []byte, dst []rowKey) ([]rowKey, error) {
	if raw == nil {
		return dst, nil
	}
	var buf [4]jsonMember
	if obj, ok := scanObject(raw, buf[:0]); ok {
		for _, m := range obj.members {
			kek, wrapped, pair := stringPair(raw[m.valueStart:m.valueEnd])
			if !m.plainName || !pair {
				ok = false
				break
			}
			w, err := hex.AppendDecode(nil, wrapped)
			if err != nil {
				return nil, err
			}
			dst = append(dst, rowKey{subject: raw[m.nameStart+1 : m.nameEnd-1], kek: kek, wrapped: w})
		}
		if ok {
			return dst, nil
		}
	}
	var m map[string][2]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	dst = dst[:0]
	for subject, k := range m {
		w, err := hex.DecodeString(k[1])
		if err != nil {
			return nil, err
		}
		dst = append(dst, rowKey{subject: []byte(subject), kek: []byte(k[0]), wrapped: w})
	}
	return dst, nil
}

// keyOf returns subject's key among keys; nil when it has none (forgotten).
func keyOf(keys []rowKey, subject []byte) *rowKey {
	for i := range keys {
		if bytes.Equal(keys[i].subject, subject) {
			return &keys[i]
		}
	}
	return nil
}

// appendAAD appends what a sealed value is authenticated with: where it is
// stored (place: an event's or a snapshot's identity), its field and its
// subject.
func appendAAD[T string | []byte](dst []byte, place string, field, subject T) []byte {
	dst = append(dst, place...)
	dst = append(dst, '|')
	dst = append(dst, field...)
	dst = append(dst, '|')
	return append(dst, subject...)
}

// eventPlace is an event's identity for appendAAD.
func eventPlace(tenant, stream uuid.UUID, version int, typ string) string {
	return "event|" + tenant.String() + "|" + stream.String() + "|" + strconv.Itoa(version) + "|" + typ
}

// snapshotPlace is a snapshot's identity for appendAAD.
func snapshotPlace(tenant, stream uuid.UUID, version int) string {
	return "snapshot|" + tenant.String() + "|" + stream.String() + "|" + strconv.Itoa(version)
}

// The sizes of an AES-GCM nonce and tag, for estimating sealed lengths.
const gcmNonceSize, gcmTagSize = 12, 16

// sealFields returns the JSON object payload with each field of personal
// that it holds (and that is not null) sealed with its subject's cipher,
// and the personal column of the fields it sealed: a JSON object, field →
// subject (nil: none). Fields are top-level names; the payload is
// rewritten in place: only the sealed values change, except that a sealed
// field's name appearing more than once keeps only its last member, the
// one sealed (the one encoding/json and jsonb read).
func sealFields(payload []byte, personal map[string]string, cipherOf func(subject string) cipher.AEAD, place string) ([]byte, *string, error) {
	var buf [16]jsonMember
	obj, ok := scanObject(payload, buf[:0])
	if !ok {
		return nil, nil, fmt.Errorf("personal fields: the payload is not a JSON object: %w", jsonObjectError(payload))
	}
	ms := obj.members
	grow := 0
	for field := range personal {
		last := -1
		for i := len(ms) - 1; i >= 0; i-- {
			switch {
			case string(ms[i].name(payload)) != field:
			case last >= 0:
				ms[i].op = dropMember
			default:
				last = i
				if n := ms[i].valueEnd - ms[i].valueStart; string(payload[ms[i].valueStart:ms[i].valueEnd]) != "null" {
					ms[i].op = replaceMember
					grow += len(sealedPrefix) + 2 + base64.RawStdEncoding.EncodedLen(gcmNonceSize+n+gcmTagSize) - n
				}
			}
		}
	}
	if grow == 0 {
		return payload, nil, nil
	}
	out := make([]byte, 0, len(payload)+grow)
	column := append(make([]byte, 0, 32*len(personal)), '{')
	var aad, text []byte
	prev := 0
	for i := range ms {
		m := &ms[i]
		switch m.op {
		case dropMember: // a later member has the name
			out = append(out, payload[prev:m.nameStart]...)
			prev = ms[i+1].nameStart
		case replaceMember:
			field := m.name(payload)
			subject := personal[string(field)]
			aead := cipherOf(subject)
			if aead == nil {
				return nil, nil, fmt.Errorf("personal field %s: no data key for subject %q", field, subject)
			}
			aad = appendAAD(aad[:0], place, field, []byte(subject))
			var err error
			if text, err = seal(text[:0], aead, payload[m.valueStart:m.valueEnd], aad); err != nil {
				return nil, nil, err
			}
			out = append(out, payload[prev:m.valueStart]...)
			out = append(out, '"')
			out = append(out, sealedPrefix...)
			out = base64.RawStdEncoding.AppendEncode(out, text)
			out = append(out, '"')
			prev = m.valueEnd
			if len(column) > 1 {
				column = append(column, ',')
			}
			column = appendJSONString(column, field)
			column = append(column, ':')
			column = appendJSONString(column, subject)
		}
	}
	out = append(out, payload[prev:]...)
	sealed := string(append(column, '}'))
	return out, &sealed, nil
}

// jsonObjectError is what encoding/json answers when data, which
// scanObject refused, is decoded as an object.
func jsonObjectError(data []byte) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return err
	}
	return errors.New("not a JSON object") // not reached: scanObject accepts what decodes
}

// appendJSONString appends s as a JSON string, escaped as encoding/json
// does.
func appendJSONString[T string | []byte](dst []byte, s T) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(string(s))
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// openSealed is openFields for a row's personal and keys columns as read.
func (s *Store) openSealed(ctx context.Context, payload json.RawMessage, personal, keys []byte, place string) (json.RawMessage, error) {
	var fbuf [8]rowField
	fields, err := rowFieldsOf(personal, fbuf[:0])
	if err != nil {
		return nil, err
	}
	var kbuf [4]rowKey
	ks, err := rowKeysOf(keys, kbuf[:0])
	if err != nil {
		return nil, err
	}
	return s.openFields(ctx, payload, fields, ks, place)
}

// openFields returns the stored JSON object payload with its sealed fields
// opened with the subjects' keys; a field whose subject has no key
// (forgotten) or that does not open reads as null, and so does a field the
// payload lacks. Like sealFields it rewrites the payload in place.
func (s *Store) openFields(ctx context.Context, payload []byte, fields []rowField, keys []rowKey, place string) ([]byte, error) {
	var buf [16]jsonMember
	obj, ok := scanObject(payload, buf[:0])
	if !ok {
		return nil, jsonObjectError(payload)
	}
	if obj.null || len(fields) == 0 {
		return payload, nil
	}
	ms := obj.members
	// Which field each member is (the last entry of a field named twice),
	// and whether the payload has it.
	var seenBuf [8]bool
	seen := seenBuf[:0]
	seen = append(seen, make([]bool, len(fields))...)
	for i := len(ms) - 1; i >= 0; i-- {
		name := ms[i].name(payload)
		f := slices.IndexFunc(fields, func(f rowField) bool { return bytes.Equal(f.field, name) })
		if f < 0 {
			continue
		}
		if l := lastField(fields, f); seen[l] {
			ms[i].op = dropMember
		} else {
			seen[l], ms[i].op, ms[i].field = true, replaceMember, l
		}
	}
	out := make([]byte, 0, len(payload))
	var aad, text []byte
	prev := 0
	for i := range ms {
		m := &ms[i]
		switch m.op {
		case dropMember:
			out = append(out, payload[prev:m.nameStart]...)
			prev = ms[i+1].nameStart
		case replaceMember:
			f := fields[m.field]
			out = append(out, payload[prev:m.valueStart]...)
			aad = appendAAD(aad[:0], place, f.field, f.subject)
			out, text = s.appendOpened(ctx, out, text, payload[m.valueStart:m.valueEnd], m.plainValue, keyOf(keys, f.subject), aad)
			prev = m.valueEnd
		}
	}
	out = append(out, payload[prev:obj.end]...)
	comma := len(ms) > 0
	for i, f := range fields {
		if seen[i] || lastField(fields, i) != i {
			continue
		}
		if comma {
			out = append(out, ',')
		}
		out = append(appendJSONString(out, f.field), ":null"...)
		comma = true
	}
	return append(out, payload[obj.end:]...), nil
}

// lastField returns the index of the last of fields named as fields[i].
func lastField(fields []rowField, i int) int {
	for j := len(fields) - 1; j > i; j-- {
		if bytes.Equal(fields[j].field, fields[i].field) {
			return j
		}
	}
	return i
}

var jsonNull = []byte("null")

// appendOpened appends to dst the sealed value v (plain: a JSON string
// without escapes) opened with the subject's key k, authenticated with
// aad; null when it does not open. text is scratch space, returned for
// reuse.
func (s *Store) appendOpened(ctx context.Context, dst, text, v []byte, plain bool, k *rowKey, aad []byte) (out, scratch []byte) {
	if k == nil || s.cfg.Keys == nil {
		return append(dst, jsonNull...), text
	}
	var str []byte
	switch {
	case plain:
		str = v[1 : len(v)-1]
	case len(v) > 0 && v[0] == '"':
		var decoded string
		if json.Unmarshal(v, &decoded) != nil {
			return append(dst, jsonNull...), text
		}
		str = []byte(decoded)
	default:
		return append(dst, jsonNull...), text
	}
	if !bytes.HasPrefix(str, []byte(sealedPrefix)) {
		return append(dst, jsonNull...), text
	}
	text, err := base64.RawStdEncoding.AppendDecode(text[:0], str[len(sealedPrefix):])
	if err != nil {
		return append(dst, jsonNull...), text
	}
	if !k.looked {
		k.looked = true
		if k.aead, err = s.keys.aeadBytes(ctx, s.cfg.Keys, k.kek, k.wrapped); err != nil {
			s.cfg.Logger.Error("eventstore: a subject's data key does not unwrap", "subject", string(k.subject), "kek", string(k.kek), "err", err)
		}
	}
	if k.aead == nil {
		return append(dst, jsonNull...), text
	}
	opened, err := open(dst, k.aead, text, aad)
	if err != nil {
		return append(dst, jsonNull...), text
	}
	return opened, text
}

// newDataKey returns a fresh data key: its cipher and the key wrapped by p.
func newDataKey(ctx context.Context, p KeyProvider) (cipher.AEAD, []byte, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, nil, err
	}
	aead, err := newGCM(k)
	if err != nil {
		return nil, nil, err
	}
	w, err := p.Wrap(ctx, k)
	return aead, w, err
}

// sealing is what an append with personal fields seals (see
// NewEvent.Personal), and with which keys.
type sealing struct {
	// fields are each event's personal fields by subject (nil: none).
	fields []map[string]string
	// subjects are the subjects of them all, and keys the keys they are
	// sealed with in the current attempt.
	subjects []subjectID
	keys     []sealKey
}

// sealKey is a subject's data key in an append.
type sealKey struct {
	wrappedKey
	aead cipher.AEAD
	// fresh: made for this attempt, offered as the subject's first key.
	fresh bool
}

// sealingOf returns what the personal fields of batch's events (a: the
// batch encoded) are sealed with; nil when none has personal fields.
func (s *Store) sealingOf(batch []StreamAppend, a *batchArgs) (*sealing, error) {
	if !hasPersonal(batch) {
		return nil, nil // the common append: nothing more to work out
	}
	if s.cfg.Keys == nil {
		return nil, ErrNoDataKey
	}
	p := &sealing{fields: make([]map[string]string, len(a.payloads))}
	k := 0
	for _, sa := range batch {
		for _, ne := range sa.Events {
			if len(ne.Personal) > 0 {
				p.fields[k] = make(map[string]string, len(ne.Personal))
				for field, subject := range ne.Personal {
					if subject == "" {
						subject = uuid.UUID(a.evAggIDs[k]).String()
					}
					p.fields[k][field] = subject
					if id := (subjectID{sa.Stream.TenantID, subject}); !slices.Contains(p.subjects, id) {
						p.subjects = append(p.subjects, id)
					}
				}
			}
			k++
		}
	}
	return p, nil
}

// seal seals a's personal fields (p) for one attempt of the append: each
// subject with the key it was last seen with, or else a fresh one. a.stored
// becomes what is written — a.payloads stay the plain payloads the
// appended events carry —, a.personal the sealed fields of each event and
// a.keys the keys for the append's key guard.
func (s *Store) seal(ctx context.Context, p *sealing, a *batchArgs) error {
	p.keys = p.keys[:0]
	ciphers := make(map[subjectID]cipher.AEAD, len(p.subjects))
	ks := keyArgs{}
	for _, id := range p.subjects {
		var sk sealKey
		if w, ok := s.keys.storedKey(id); ok {
			aead, err := s.keys.aead(ctx, s.cfg.Keys, w.kek, w.wrapped)
			if err != nil {
				return err
			}
			sk = sealKey{wrappedKey: w, aead: aead}
		} else {
			aead, w, err := newDataKey(ctx, s.cfg.Keys)
			if err != nil {
				return fmt.Errorf("%w: wrap a new data key: %w", ErrDataKey, err)
			}
			sk = sealKey{wrappedKey: wrappedKey{kek: s.cfg.Keys.KeyID(), wrapped: w}, aead: aead, fresh: true}
		}
		p.keys = append(p.keys, sk)
		ciphers[id] = sk.aead
		ks.tenants = append(ks.tenants, id.tenant)
		ks.subjects = append(ks.subjects, id.subject)
		ks.keks = append(ks.keks, sk.kek)
		ks.wrapped = append(ks.wrapped, sk.wrapped)
		ks.fresh = append(ks.fresh, sk.fresh)
	}
	a.keys = &ks
	a.stored, a.personal = slices.Clone(a.payloads), make([]*string, len(a.payloads))
	for k, f := range p.fields {
		if f == nil {
			continue
		}
		tenant, stream := uuid.UUID(a.evTenants[k]), uuid.UUID(a.evAggIDs[k])
		stored, sealed, err := sealFields(a.payloads[k], f, func(subject string) cipher.AEAD { return ciphers[subjectID{tenant, subject}] },
			eventPlace(tenant, stream, int(a.versions[k]), a.types[k]))
		if err != nil {
			return fmt.Errorf("%w: event %s: %w", ErrInvalidEvent, a.types[k], err)
		}
		a.stored[k], a.personal[k] = stored, sealed
	}
	return nil
}

// sealed records the fresh keys of an append that wrote its events: the
// subjects' keys from now on, as far as this process knows.
func (s *Store) sealed(p *sealing) {
	for i, id := range p.subjects {
		if k := p.keys[i]; k.fresh {
			s.keys.put(k.kek, k.wrapped, k.aead)
			s.keys.remember(id, k.wrappedKey)
		}
	}
}

// resealNeeded tells, after an append with personal fields (p) wrote
// nothing, whether its key guard failed: it reads the keys stored for the
// subjects through q, remembers them, and reports whether one is not the
// key the append sealed with. When none differs, the append failed for
// another reason (a stream's version).
func (s *Store) resealNeeded(ctx context.Context, q querier, p *sealing) (bool, error) {
	tenants, subjects := make([]uuid.UUID, len(p.subjects)), make([]string, len(p.subjects))
	for i, id := range p.subjects {
		tenants[i], subjects[i] = id.tenant, id.subject
	}
	rows, err := q.Query(ctx, s.sql.storedKeys, tenants, subjects)
	if err != nil {
		return false, fmt.Errorf("subject keys: %w", err)
	}
	stored := make(map[subjectID]wrappedKey, len(p.subjects))
	var (
		id subjectID
		k  wrappedKey
	)
	if _, err := pgx.ForEachRow(rows, []any{(*[16]byte)(&id.tenant), &id.subject, &k.kek, &k.wrapped}, func() error {
		stored[id] = k
		return nil
	}); err != nil {
		return false, fmt.Errorf("subject keys: %w", err)
	}
	stale := false
	for i, id := range p.subjects {
		k, ok := stored[id]
		if !ok {
			// Forgotten (or the fresh key rolled back): a fresh one next.
			s.keys.forget(id)
			stale = true
			continue
		}
		s.keys.remember(id, k)
		stale = stale || k.kek != p.keys[i].kek || !bytes.Equal(k.wrapped, p.keys[i].wrapped)
	}
	return stale, nil
}

// subjectCiphers returns the ciphers of the data keys of subjects of
// tenant, creating the keys that do not exist yet (through q: in the
// caller's transaction when there is one). A new key is offered only for
// a subject this process has not seen with a key; one that turns out to
// have none (forgotten since) gets one on the next attempt.
func (s *Store) subjectCiphers(ctx context.Context, q querier, tenant uuid.UUID, subjects []string) (map[string]cipher.AEAD, error) {
	out := make(map[string]cipher.AEAD, len(subjects))
	offer := map[string]bool{}
	for _, sub := range subjects {
		_, seen := s.keys.storedKey(subjectID{tenant, sub})
		offer[sub] = !seen
	}
	for attempt := 0; attempt < 3; attempt++ {
		var ask []string
		var offered [][]byte
		for _, sub := range subjects {
			if out[sub] != nil {
				continue
			}
			var w []byte
			if offer[sub] {
				var err error
				if _, w, err = newDataKey(ctx, s.cfg.Keys); err != nil {
					return nil, fmt.Errorf("%w: wrap a new data key: %w", ErrDataKey, err)
				}
			}
			ask, offered = append(ask, sub), append(offered, w)
		}
		if len(ask) == 0 {
			return out, nil
		}
		rows, err := q.Query(ctx, s.sql.subjectKeys, tenant, ask, offered, s.cfg.Keys.KeyID())
		if err != nil {
			return nil, fmt.Errorf("subject keys: %w", err)
		}
		var (
			sub string
			k   wrappedKey
		)
		_, err = pgx.ForEachRow(rows, []any{&sub, &k.kek, &k.wrapped}, func() error {
			aead, err := s.keys.aead(ctx, s.cfg.Keys, k.kek, k.wrapped)
			if err != nil {
				return err
			}
			out[sub] = aead
			s.keys.remember(subjectID{tenant, sub}, k)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("subject keys: %w", err)
		}
		for _, sub := range ask {
			if out[sub] == nil {
				offer[sub] = true // forgotten, or created concurrently: offer one
			}
		}
	}
	return nil, fmt.Errorf("subject keys: tenant %s: no key for some of %v after 3 attempts", tenant, subjects)
}

// sealSnapshot returns snap's state as stored, its personal fields sealed,
// and the sealed fields (nil: none).
func (s *Store) sealSnapshot(ctx context.Context, q querier, snap Snapshot) ([]byte, *string, error) {
	if len(snap.Personal) == 0 {
		return snap.State, nil, nil
	}
	if s.cfg.Keys == nil {
		return nil, nil, ErrNoDataKey
	}
	fields := make(map[string]string, len(snap.Personal))
	var subjects []string
	for field, subject := range snap.Personal {
		if subject == "" {
			subject = snap.AggregateID.String()
		}
		fields[field] = subject
		if !slices.Contains(subjects, subject) {
			subjects = append(subjects, subject)
		}
	}
	ciphers, err := s.subjectCiphers(ctx, q, snap.TenantID, subjects)
	if err != nil {
		return nil, nil, err
	}
	return sealFields(snap.State, fields, func(subject string) cipher.AEAD { return ciphers[subject] }, snapshotPlace(snap.TenantID, snap.AggregateID, snap.Version))
}

// ForgetSubjectTx forgets subject of tenant in the caller's transaction:
// it deletes the subject's data key, so that once tx commits no read opens
// the subject's sealed values in events and snapshots — they read as null.
// It reports whether the subject had a key; forgetting one without is not
// an error.
func (s *Store) ForgetSubjectTx(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, subject string) (bool, error) {
	tag, err := tx.Exec(ctx, s.sql.forgetSubject, tenant, subject)
	if err != nil {
		return false, TranslateError(fmt.Errorf("forget subject: %w", err))
	}
	return tag.RowsAffected() > 0, nil
}

// RequestKey names a request by what its events record of it
// (Metadata.UserID, Metadata.IdempotencyKey): the key of its cached
// idempotent response.
type RequestKey struct {
	UserID string
	Key    string
}

// SubjectRequestsTx returns the requests with an idempotency key whose
// events in tenant hold sealed fields of subject: the requests whose cached
// responses may hold the subject's personal data. It reads the events'
// metadata and subjects, which stay after a forget, so it answers the same
// before and after ForgetSubjectTx.
func (s *Store) SubjectRequestsTx(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, subject string) ([]RequestKey, error) {
	rows, err := tx.Query(ctx, s.sql.subjectRequests, tenant, subject)
	if err != nil {
		return nil, TranslateError(fmt.Errorf("subject requests: %w", err))
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RequestKey, error) {
		var k RequestKey
		return k, row.Scan(&k.UserID, &k.Key)
	})
	if err != nil {
		return nil, TranslateError(fmt.Errorf("subject requests: %w", err))
	}
	return keys, nil
}

// CheckKeys makes sure the configured key-encryption key opens what the
// database holds: every KEK that wrapped a data key has a check row (a
// data key it wrapped), and each must unwrap. It records the current KEK's
// check when it has none. A store holding personal data without Keys, and
// a KEK that does not match, are errors: the start fails rather than a
// read showing null.
func (s *Store) CheckKeys(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, s.sql.keyChecks)
	if err != nil {
		return TranslateError(fmt.Errorf("key checks: %w", err))
	}
	var (
		kek     string
		wrapped []byte
		current bool
	)
	_, err = pgx.ForEachRow(rows, []any{&kek, &wrapped}, func() error {
		if s.cfg.Keys == nil {
			return fmt.Errorf("%w: the database holds personal data keys wrapped by %s, but no data key is configured (KUMIKO_DATA_KEY)", ErrDataKey, kek)
		}
		if _, err := s.cfg.Keys.Unwrap(ctx, kek, wrapped); err != nil {
			return fmt.Errorf("%w: the configured data key does not open the keys wrapped by %s (a wrong KUMIKO_DATA_KEY, or a rotation's previous key missing): %w", ErrDataKey, kek, err)
		}
		current = current || kek == s.cfg.Keys.KeyID()
		return nil
	})
	if err != nil || s.cfg.Keys == nil || current {
		return TranslateError(err)
	}
	_, w, err := newDataKey(ctx, s.cfg.Keys)
	if err != nil {
		return fmt.Errorf("%w: wrap a check key: %w", ErrDataKey, err)
	}
	if _, err := s.pool.Exec(ctx, s.sql.addKeyCheck, s.cfg.Keys.KeyID(), w); err != nil {
		return TranslateError(fmt.Errorf("key checks: %w", err))
	}
	return nil
}

// rotatePage is how many data keys RotateKeys re-wraps per transaction.
const rotatePage = 500

// RotateKeys re-wraps every data key that another key-encryption key than
// Config.Keys' current one wrapped (Keys must still unwrap it: configure
// the previous KEK after the new one), a page per transaction, and then
// drops the start checks of KEKs that wrap nothing any more — after which
// the previous KEK can be removed from the configuration. It returns how
// many keys it re-wrapped. Safe to run while the app runs and to run again.
func (s *Store) RotateKeys(ctx context.Context) (int, error) {
	if s.cfg.Keys == nil {
		return 0, ErrNoDataKey
	}
	current := s.cfg.Keys.KeyID()
	total := 0
	for {
		n, err := s.rotatePage(ctx, current)
		total += n
		if err != nil {
			return total, err
		}
		if n < rotatePage {
			break
		}
	}
	if err := s.CheckKeys(ctx); err != nil { // records the current KEK's check
		return total, err
	}
	if _, err := s.pool.Exec(ctx, s.sql.dropKeyChecks, current); err != nil {
		return total, TranslateError(fmt.Errorf("key checks: %w", err))
	}
	return total, nil
}

// rotatePage re-wraps one page of keys with the KEK current.
func (s *Store) rotatePage(ctx context.Context, current string) (int, error) {
	n := 0
	err := s.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		rows, err := tx.Query(ctx, s.sql.staleKeys, current, rotatePage)
		if err != nil {
			return err
		}
		type stale struct {
			tenant  [16]byte
			subject string
			key     wrappedKey
		}
		var page []stale
		var st stale
		if _, err := pgx.ForEachRow(rows, []any{&st.tenant, &st.subject, &st.key.kek, &st.key.wrapped}, func() error {
			page = append(page, st)
			return nil
		}); err != nil {
			return err
		}
		b := &pgx.Batch{}
		for _, k := range page {
			plain, err := s.cfg.Keys.Unwrap(ctx, k.key.kek, k.key.wrapped)
			if err != nil {
				return fmt.Errorf("a data key of tenant %s: %w", uuid.UUID(k.tenant), err)
			}
			w, err := s.cfg.Keys.Wrap(ctx, plain)
			if err != nil {
				return fmt.Errorf("%w: wrap: %w", ErrDataKey, err)
			}
			b.Queue(s.sql.rewrapKey, k.tenant, k.subject, current, w)
		}
		n = len(page)
		if n == 0 {
			return nil
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return 0, TranslateError(fmt.Errorf("rotate data keys: %w", err))
	}
	return n, nil
}

// SubjectEvent is what one event holds of a data subject: the event's
// identity and the subject's personal fields in it, open (field names as
// stored, before any upcast).
type SubjectEvent struct {
	EventID       int64                      `json:"eventId"`
	AggregateType string                     `json:"aggregateType"`
	AggregateID   uuid.UUID                  `json:"aggregateId"`
	Version       int                        `json:"version"`
	Type          string                     `json:"type"`
	CreatedAt     time.Time                  `json:"createdAt"`
	Fields        map[string]json.RawMessage `json:"fields"`
}

// subjectPage is how many events SubjectEvents reads per round trip.
const subjectPage = 500

// SubjectEvents returns, in id order, every event of tenant that holds
// personal fields of subject, with those fields open: the event store's
// part of the subject's data export. A forgotten subject has none that
// open: its fields read as null.
func (s *Store) SubjectEvents(ctx context.Context, tenant uuid.UUID, subject string) ([]SubjectEvent, error) {
	var (
		out   []SubjectEvent
		after int64
	)
	for {
		rows, err := s.pool.Query(ctx, s.sql.subjectEvents, tenant, subject, after, subjectPage)
		if err != nil {
			return nil, TranslateError(fmt.Errorf("subject events: %w", err))
		}
		var (
			e   Event
			raw eventRow
			n   int
		)
		_, err = pgx.ForEachRow(rows, raw.dest(&e), func() error {
			n, after = n+1, e.ID
			fields, err := rowFieldsOf(raw.personal, nil)
			if err != nil {
				return err
			}
			var buf [16]jsonMember
			obj, ok := scanObject(raw.payload, buf[:0])
			if !ok {
				return jsonObjectError(raw.payload)
			}
			keys, err := rowKeysOf(raw.keys, nil)
			if err != nil {
				return err
			}
			se := SubjectEvent{EventID: e.ID, AggregateType: e.AggregateType, AggregateID: e.AggregateID, Version: e.Version,
				Type: e.Type, CreatedAt: e.CreatedAt, Fields: map[string]json.RawMessage{}}
			place := eventPlace(e.TenantID, e.AggregateID, e.Version, e.Type)
			for i, f := range fields {
				if string(f.subject) != subject || lastField(fields, i) != i {
					continue
				}
				var v []byte
				plain := false
				for j := len(obj.members) - 1; j >= 0; j-- { // the last member of the name
					if m := obj.members[j]; bytes.Equal(m.name(raw.payload), f.field) {
						v, plain = raw.payload[m.valueStart:m.valueEnd], m.plainValue
						break
					}
				}
				se.Fields[string(f.field)], _ = s.appendOpened(ctx, nil, nil, v, plain, keyOf(keys, f.subject), appendAAD(nil, place, f.field, f.subject))
			}
			out = append(out, se)
			return nil
		})
		if err != nil {
			return nil, TranslateError(fmt.Errorf("subject events: %w", err))
		}
		if n < subjectPage {
			return out, nil
		}
	}
}
