package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// The one-pass check of a valid body answers what walking its tokens
// answers: the same refusal, or none.
func FuzzScanValidMatchesTokens(f *testing.F) {
	for _, s := range []string{
		`{}`, ` {"a":1} `, `[]`, `"x"`, `{"a":"\u0000"}`, `{"a":"\\u0000"}`, `{"\u0000":1}`,
		`{"a":[[[[{"b":[1]}]]]]}`, `{"a":"\"[[[["}`, `{"a":"\u00000"}`, `{"a":"x\\"}`, `{"a":{"b":{"c":{}}}}`,
		`{"a":1,"a":2}`, `{"a":{"a":1},"b":[{"a":1},{"a":1,"a":2}]}`, `{"a":1,"\u0061":2}`, `{"\ud800":1,"\udbff":2}`,
		`{"a b":[[],[{"c":1}],{"x":{"y":1,"y":2}}]}`, `{"a":[{"b":1},{"b":2}],"c":{"d":[1,{"e":1,"f":{},"e":3}]}}`,
		`{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":{"k1":1},"k1":1}`,
	} {
		f.Add([]byte(s), 3)
	}
	f.Fuzz(func(t *testing.T, body []byte, maxDepth int) {
		if !json.Valid(body) || maxDepth < 1 || maxDepth > 64 {
			return
		}
		fast, slow := scanValid(body, maxDepth), scanTokens(body, maxDepth)
		if (fast == nil) != (slow == nil) {
			t.Fatalf("%s (depth %d): one pass %v, tokens %v", body, maxDepth, fast, slow)
		}
		var f, sl *apiError
		if fast != nil && (!errors.As(fast, &f) || !errors.As(slow, &sl) || f.Reason() != sl.Reason() || !slices.Equal(f.Fields(), sl.Fields())) {
			t.Fatalf("%s (depth %d): one pass %v %v, tokens %v %v", body, maxDepth, fast, f.Fields(), slow, sl.Fields())
		}
	})
}

// BenchmarkScanJSON is the check of a valid body, duplicate keys included:
// a typical write, and a large body of many small objects.
func BenchmarkScanJSON(b *testing.B) {
	small := []byte(`{"type":"task.update","payload":{"id":"0190a000-0000-7000-8000-00000000000a","version":3,"changes":{"title":"buy milk","done":true,"dueAt":"2026-04-15T10:00:00Z"}}}`)
	var large bytes.Buffer
	large.WriteString(`{"commands":[`)
	for i := range 500 {
		if i > 0 {
			large.WriteByte(',')
		}
		fmt.Fprintf(&large, `{"type":"doc.create","payload":{"body":{"name":"item %d","tags":["a","b"],"size":{"w":%d,"h":2},"note":"n\"q"}}}`, i, i)
	}
	large.WriteString(`]}`)
	for _, c := range []struct {
		name string
		body []byte
	}{{"write", small}, {"batch", large.Bytes()}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				if err := scanJSON(c.body, 23); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
