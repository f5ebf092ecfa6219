package main

import (
	"context"
	"encoding/json"
	"errors"
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
type handService struct {
	srv     *http.Server
	redis   *redis.Client
	records sync.WaitGroup
}

// startHandService serves POST /api/write on a loopback port and returns
// the service and the URL to post to; write gets the request's key.
func startHandService(ctx context.Context, bearer string, write func(ctx context.Context, key string) error) (*handService, string, error) {
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
		var req struct {
			Type    string         `json:"type"`
			Payload map[string]any `json:"payload"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Type == "" {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		idemKey := r.Header.Get("Idempotency-Key")
		key := "hand:" + idemKey
		ok, err := h.redis.SetNX(r.Context(), key, "pending", 24*time.Hour).Result()
		if err != nil || !ok {
			http.Error(w, "key in use", http.StatusConflict)
			return
		}
		if err := write(r.Context(), idemKey); err != nil {
			h.redis.Del(context.WithoutCancel(r.Context()), key)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		answer := []byte(`{"data":{"ok":true}}`)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
		h.records.Go(func() { h.redis.Set(context.Background(), key, answer, 24*time.Hour) })
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
