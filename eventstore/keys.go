package eventstore

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/google/uuid"
)

// KeyProvider wraps and unwraps the data keys of data subjects with a
// key-encryption key (KEK) the database never holds: a key from
// configuration (LocalKeys, KUMIKO_DATA_KEY) or a key management service.
// The store keeps the wrapped data keys in kumiko_subject_keys; deleting a
// subject's row is what forgets it.
//
// Implementations must be safe for concurrent use.
type KeyProvider interface {
	// KeyID names the KEK that Wrap uses now. It is stored with every
	// wrapped key, so that a provider that knows older KEKs unwraps keys
	// wrapped before a rotation.
	KeyID() string
	// Wrap encrypts a data key with the current KEK.
	Wrap(ctx context.Context, dataKey []byte) ([]byte, error)
	// Unwrap decrypts a data key wrapped with the KEK keyID; it fails for
	// a KEK it does not hold and for a wrapped key that does not
	// authenticate.
	Unwrap(ctx context.Context, keyID string, wrapped []byte) ([]byte, error)
}

// LocalKeys is a KeyProvider holding its KEKs in memory: the current one,
// which wraps, and earlier ones, which only unwrap (during a rotation).
// Each is 32 random bytes used with AES-256-GCM; its id is "local:" and the
// first 16 hex digits of its SHA-256.
type LocalKeys struct {
	current string
	keks    map[string]cipher.AEAD
}

// NewLocalKeys returns a provider wrapping with current and unwrapping with
// it and previous. Every key must be 32 bytes.
func NewLocalKeys(current []byte, previous ...[]byte) (*LocalKeys, error) {
	l := &LocalKeys{keks: map[string]cipher.AEAD{}}
	for i, k := range append([][]byte{current}, previous...) {
		if len(k) != 32 {
			return nil, fmt.Errorf("eventstore: data key-encryption key %d is %d bytes; it must be 32 (base64 of 32 random bytes)", i+1, len(k))
		}
		aead, err := newGCM(k)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(k)
		id := "local:" + hex.EncodeToString(sum[:8])
		if i == 0 {
			l.current = id
		}
		l.keks[id] = aead
	}
	return l, nil
}

// ParseLocalKeys reads KEKs in the form of KUMIKO_DATA_KEY: base64 (standard
// or URL alphabet, padded or not) of 32 bytes each, separated by commas,
// the current one first.
func ParseLocalKeys(s string) (*LocalKeys, error) {
	parts := strings.Split(s, ",")
	keys := make([][]byte, 0, len(parts))
	for i, p := range parts {
		k, err := decodeBase64(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("eventstore: data key-encryption key %d is not base64: %w", i+1, err)
		}
		keys = append(keys, k)
	}
	return NewLocalKeys(keys[0], keys[1:]...)
}

func decodeBase64(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	if strings.ContainsAny(s, "-_") {
		return base64.RawURLEncoding.DecodeString(s)
	}
	return base64.RawStdEncoding.DecodeString(s)
}

// KeyID is the id of the current KEK.
func (l *LocalKeys) KeyID() string { return l.current }

// Wrap encrypts dataKey with the current KEK: a random nonce, then the
// sealed key.
func (l *LocalKeys) Wrap(_ context.Context, dataKey []byte) ([]byte, error) {
	return seal(nil, l.keks[l.current], dataKey, []byte(l.current))
}

// Unwrap decrypts a key wrapped with the KEK keyID.
func (l *LocalKeys) Unwrap(_ context.Context, keyID string, wrapped []byte) ([]byte, error) {
	aead := l.keks[keyID]
	if aead == nil {
		return nil, fmt.Errorf("%w: no key-encryption key %s is configured", ErrDataKey, keyID)
	}
	k, err := open(nil, aead, wrapped, []byte(keyID))
	if err != nil {
		return nil, fmt.Errorf("%w: the wrapped key does not open with %s", ErrDataKey, keyID)
	}
	return k, nil
}

// ErrDataKey: a subject's data key could not be unwrapped — the wrapping
// key is not configured, or not the one the key was wrapped with.
var ErrDataKey = errors.New("eventstore: data key")

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// seal encrypts plain with aead under a random nonce, authenticating aad,
// and appends the nonce followed by the sealed text to dst.
func seal(dst []byte, aead cipher.AEAD, plain, aad []byte) ([]byte, error) {
	n := len(dst)
	dst = slices.Grow(dst, aead.NonceSize()+len(plain)+aead.Overhead())[:n+aead.NonceSize()]
	nonce := dst[n:]
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return aead.Seal(dst, nonce, plain, aad), nil
}

// open reverses seal, appending the plain text to dst. dst's spare
// capacity must not overlap sealed.
func open(dst []byte, aead cipher.AEAD, sealed, aad []byte) ([]byte, error) {
	if len(sealed) < aead.NonceSize()+aead.Overhead() {
		return nil, errors.New("sealed value too short")
	}
	n := aead.NonceSize()
	return aead.Open(dst, sealed[:n], sealed[n:], aad)
}

// dataKeys caches, for an append, the data key each subject was last seen
// with (stored) and, for every read, the ciphers of unwrapped data keys by
// their wrapped form. It never decides whether a key exists: a read finds
// the wrapped key in the database first, in its own statement, so a
// forgotten subject's key, gone from the table, is never found here; an
// append that seals with a key of stored has its insert check that the
// key row still holds that key (see queries.keyGuard). The ciphers spare
// the KEK (a KMS call) an unwrap per read.
type dataKeys struct {
	mu sync.Mutex
	// ciphers: KEK id → wrapped key → cipher; n counts them.
	ciphers map[string]map[string]cipher.AEAD
	n       int
	stored  map[subjectID]wrappedKey
}

// subjectID is a data subject of a tenant: what a key row is for.
type subjectID struct {
	tenant  uuid.UUID
	subject string
}

// storedKey returns the key subject was last seen with.
func (d *dataKeys) storedKey(id subjectID) (wrappedKey, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k, ok := d.stored[id]
	return k, ok
}

// remember records that subject id was seen with key k.
func (d *dataKeys) remember(id subjectID, k wrappedKey) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stored == nil || len(d.stored) >= maxCachedKeys {
		d.stored = map[subjectID]wrappedKey{}
	}
	d.stored[id] = k
}

// forget drops what was seen of subject id.
func (d *dataKeys) forget(id subjectID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.stored, id)
}

// maxCachedKeys bounds each cache; it is emptied when full.
const maxCachedKeys = 10000

// aead returns the cipher of the data key wrapped as wrapped with KEK kek.
func (d *dataKeys) aead(ctx context.Context, p KeyProvider, kek string, wrapped []byte) (cipher.AEAD, error) {
	d.mu.Lock()
	a := d.ciphers[kek][string(wrapped)]
	d.mu.Unlock()
	if a != nil {
		return a, nil
	}
	k, err := p.Unwrap(ctx, kek, wrapped)
	if err != nil {
		return nil, err
	}
	if a, err = newGCM(k); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDataKey, err)
	}
	d.put(kek, wrapped, a)
	return a, nil
}

// aeadBytes is aead for a KEK id and a wrapped key read from a row: a
// cached cipher is found without copying them.
func (d *dataKeys) aeadBytes(ctx context.Context, p KeyProvider, kek, wrapped []byte) (cipher.AEAD, error) {
	d.mu.Lock()
	a := d.ciphers[string(kek)][string(wrapped)]
	d.mu.Unlock()
	if a != nil {
		return a, nil
	}
	return d.aead(ctx, p, string(kek), wrapped)
}

// put caches a, the cipher of the data key wrapped as wrapped with kek.
func (d *dataKeys) put(kek string, wrapped []byte, a cipher.AEAD) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ciphers == nil || d.n >= maxCachedKeys {
		d.ciphers, d.n = map[string]map[string]cipher.AEAD{}, 0
	}
	m := d.ciphers[kek]
	if m == nil {
		m = map[string]cipher.AEAD{}
		d.ciphers[kek] = m
	}
	if m[string(wrapped)] == nil {
		d.n++
	}
	m[string(wrapped)] = a
}
