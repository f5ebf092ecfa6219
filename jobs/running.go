package jobs

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// attempt is one attempt a worker is in. The attempt number tells apart
// two attempts of one job in one process: a rescued job run again while
// its first attempt still works.
type attempt struct {
	id      int64
	attempt int
	kind    string
}

// running is the set of attempts a Runner's workers are in, so that Stop
// can name those it gives up on.
type running struct {
	mu sync.Mutex
	m  map[attempt]struct{}
}

func (s *running) add(a attempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[attempt]struct{}{}
	}
	s.m[a] = struct{}{}
}

func (s *running) remove(a attempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, a)
}

// list returns the attempts by job id.
func (s *running) list() []attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]attempt, 0, len(s.m))
	for a := range s.m {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b attempt) int {
		return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.attempt, b.attempt))
	})
	return out
}

// describe names attempts as "job task.remind (id 12)" or "jobs a (id 1),
// b (id 2)".
func describe(as []attempt) string {
	names := make([]string, len(as))
	for i, a := range as {
		names[i] = fmt.Sprintf("%s (id %d)", a.kind, a.id)
	}
	noun := "job "
	if len(as) > 1 {
		noun = "jobs "
	}
	return noun + strings.Join(names, ", ")
}
