package eventstore

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// decodeMetadata reads every metadata text as encoding/json does: the
// scanner's rows and the ones it hands on alike.
func FuzzDecodeMetadata(f *testing.F) {
	for _, seed := range []string{
		`{}`, ` { } `, `{"userId": "u"}`,
		`{"userId": "u-1", "requestId": "r", "causationId": "7", "correlationId": "c", "idempotencyKey": "k"}`,
		`{"headers": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x": ""}, "userId": "ü"}`,
		`{"headers": {}}`, `{"headers": null}`, `{"userId": null}`, `{"userId": "a\"b"}`, `{"userId": "a\u00e9"}`,
		`{"UserID": "case"}`, `{"other": 1}`, `{"userId": 1}`, `{"userId": "a", "userId": "b"}`,
		`{"userId": "a",}`, `{"userId" "a"}`, `{"userId": "a"} x`, `[]`, `null`, `{"headers": {"a": 1}}`, "{\"userId\": \"\xff\"}",
		"{\"userId\": \"a\tb\"}", `{"headers": {"a": "b", "a": "c"}}`, `{"headers": {"a": "b"}, "headers": {"c": "d"}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want Metadata
		wantErr := json.Unmarshal(b, &want)
		var got Metadata
		err := decodeMetadata(b, &got)
		if wantErr != nil {
			require.Error(t, err, "%q", b)
			return
		}
		require.NoError(t, err, "%q", b)
		require.Equal(t, want, got, "%q", b)
	})
}

// The rows the store writes take the scanner's path, not encoding/json's.
func TestScanMetadataTakesStoredRows(t *testing.T) {
	t.Parallel()
	for _, b := range []string{
		`{}`,
		`{"userId": "u-1", "requestId": "r", "correlationId": "c", "headers": {"traceparent": "00-aa-bb-01"}}`,
	} {
		var m Metadata
		require.True(t, scanMetadata([]byte(b), &m), b)
	}
}
