package http

import (
	"encoding/json"
	"errors"
	"testing"
)

// The one-pass check of a valid body answers what walking its tokens
// answers: the same refusal, or none.
func FuzzScanValidMatchesTokens(f *testing.F) {
	for _, s := range []string{
		`{}`, ` {"a":1} `, `[]`, `"x"`, `{"a":"\u0000"}`, `{"a":"\\u0000"}`, `{"\u0000":1}`,
		`{"a":[[[[{"b":[1]}]]]]}`, `{"a":"\"[[[["}`, `{"a":"\u00000"}`, `{"a":"x\\"}`, `{"a":{"b":{"c":{}}}}`,
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
		if fast != nil && (!errors.As(fast, &f) || !errors.As(slow, &sl) || f.reason != sl.reason) {
			t.Fatalf("%s (depth %d): one pass %v, tokens %v", body, maxDepth, fast, slow)
		}
	})
}
