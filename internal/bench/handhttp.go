package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// handService is the HTTP create written by hand with the same parts as a
// kumiko server and nothing else: net/http, the bearer token compared as a
// string, the body decoded, the Idempotency-Key claimed in Redis with SET NX
// and its answer stored after the response, and write (the raw transaction
// of the event and the read row). It is the ceiling of any HTTP service that
// does this work, next to which the framework's own cost shows.
//
// With records set it keeps the key the way replays need (SPEC §5): the
// claim stores a record naming the request's fingerprint (a SHA-256 of
// method, path and body) unless the key holds one already, which it
// returns, and the answer write's result, encoded, is stored in the record
// unless the key belongs to another fingerprint — each one script call, as
// a replaying service must check and set at once.
type handService struct {
	srv     *http.Server
	redis   *redis.Client
	records sync.WaitGroup
}

// The hand-written service's record scripts (see handService).
var (
	handClaim = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1`)
	handComplete = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and cjson.decode(v).fingerprint ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1`)
)

// handRecord is a key's record in the hand-written service with records.
type handRecord struct {
	State       string          `json:"state"`
	Fingerprint string          `json:"fingerprint"`
	Answer      json.RawMessage `json:"answer,omitempty"`
}

// startHandService serves POST /api/write on a loopback port and returns
// the service and the URL to post to; write gets the request's key and
// returns what is answered as data (nil: {"ok":true}).
func startHandService(ctx context.Context, bearer string, records bool, write func(ctx context.Context, key string) (any, error)) (*handService, string, error) {
	redisURL := os.Getenv("REDIS_URL")
	if redisURL == "" {
		redisURL = defaultRedisURL
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, "", err
	}
	h := &handService{redis: redis.NewClient(opts)}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", errors.Join(err, h.redis.Close())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/write", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != bearer {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		body, err := io.ReadAll(r.Body)
		var req struct {
			Type    string         `json:"type"`
			Payload map[string]any `json:"payload"`
		}
		if err != nil || json.Unmarshal(body, &req) != nil || req.Type == "" {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		idemKey := r.Header.Get("Idempotency-Key")
		key := "hand:" + idemKey
		var fingerprint string
		if records {
			sum := sha256.Sum256([]byte(r.Method + "\n" + r.URL.Path + "\n" + string(body)))
			fingerprint = base64.StdEncoding.EncodeToString(sum[:])
			pending, _ := json.Marshal(handRecord{State: "pending", Fingerprint: fingerprint})
			held, err := handClaim.Run(r.Context(), h.redis, []string{key}, pending, time.Minute.Milliseconds()).Result()
			if err != nil || held != int64(1) {
				http.Error(w, "key in use", http.StatusConflict)
				return
			}
		} else if ok, err := h.redis.SetNX(r.Context(), key, "pending", 24*time.Hour).Result(); err != nil || !ok {
			http.Error(w, "key in use", http.StatusConflict)
			return
		}
		out, err := write(r.Context(), idemKey)
		if err != nil {
			h.redis.Del(context.WithoutCancel(r.Context()), key)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if out == nil {
			out = map[string]bool{"ok": true}
		}
		answer, err := json.Marshal(map[string]any{"data": out})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
		h.records.Go(func() {
			if !records {
				h.redis.Set(context.Background(), key, answer, 24*time.Hour)
				return
			}
			done, _ := json.Marshal(handRecord{State: "done", Fingerprint: fingerprint, Answer: answer})
			handComplete.Run(context.Background(), h.redis, []string{key}, fingerprint, done, (24 * time.Hour).Milliseconds())
		})
	})
	h.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = h.srv.Serve(ln) }()
	return h, "http://" + ln.Addr().String() + "/api/write", nil
}

// stop shuts the service down and waits for its Redis records.
func (h *handService) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = h.srv.Shutdown(ctx)
	h.records.Wait()
	_ = h.redis.Close()
}
