package feature_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
)

type nameV1 struct {
	Name string `json:"name"`
}

type nameV2 struct {
	First string      `json:"first"`
	Last  string      `json:"last"`
	Score json.Number `json:"score,omitempty"`
}

// MapAs decodes the object into From, runs the function and answers To's
// object; what does not decode, a failing function and a To that is no
// object fail the step.
func TestMapAs(t *testing.T) {
	step := feature.MapAs(func(v nameV1) (nameV2, error) {
		if v.Name == "" {
			return nameV2{}, errors.New("no name")
		}
		return nameV2{First: v.Name[:1], Last: v.Name[1:], Score: "12345678901234567890"}, nil
	})
	require.NoError(t, step.Err())
	out, err := step.Apply(map[string]any{"name": "Ada", "dropped": true})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"first": "A", "last": "da", "score": json.Number("12345678901234567890")}, out,
		"fields neither type names are dropped; numbers stay exact")

	_, err = step.Apply(map[string]any{"name": ""})
	require.EqualError(t, err, "migration map func: no name")
	_, err = step.Apply(map[string]any{"name": 1})
	require.ErrorContains(t, err, "decode into feature_test.nameV1")

	notObject := feature.MapAs(func(nameV1) ([]string, error) { return []string{"x"}, nil })
	_, err = notObject.Apply(map[string]any{"name": "x"})
	require.EqualError(t, err, "migration map func: []string does not encode to a JSON object")

	require.Error(t, feature.MapAs[nameV1, nameV2](nil).Err(), "a nil function is a boot error")
}
