package feature_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
)

func TestMigrationSteps(t *testing.T) {
	t.Parallel()

	obj := map[string]any{"by": "ann", "old": 1}
	out, err := feature.Rename("by", "completedBy").Apply(obj)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"completedBy": "ann", "old": 1}, out)

	out, err = feature.Rename("missing", "x").Apply(map[string]any{"a": 1})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"a": 1}, out, "renaming an absent field changes nothing")

	out, err = feature.Rename("a", "b").Apply(map[string]any{"a": 1, "b": 2})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"b": 1}, out, "the renamed field wins")

	out, err = feature.Drop("old").Apply(map[string]any{"old": 1, "keep": 2})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"keep": 2}, out)

	def := feature.DefaultValue("tags", []string{"a"})
	first, err := def.Apply(map[string]any{})
	require.NoError(t, err)
	require.Equal(t, []any{"a"}, first["tags"])
	first["tags"].([]any)[0] = "changed"
	second, err := def.Apply(map[string]any{})
	require.NoError(t, err)
	require.Equal(t, []any{"a"}, second["tags"], "every payload gets its own copy of the default")

	out, err = feature.DefaultValue("n", 1).Apply(map[string]any{"n": nil})
	require.NoError(t, err)
	require.Nil(t, out["n"], "a present null is kept")

	out, err = feature.DefaultValue("n", 12345678901234567).Apply(map[string]any{})
	require.NoError(t, err)
	require.Equal(t, json.Number("12345678901234567"), out["n"], "numbers keep their precision")

	double := feature.MapFunc(func(m map[string]any) (map[string]any, error) {
		m["x"] = "mapped"
		return m, nil
	})
	out, err = double.Apply(map[string]any{})
	require.NoError(t, err)
	require.Equal(t, "mapped", out["x"])
}

func TestMapFuncFailures(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	_, err := feature.MapFunc(func(map[string]any) (map[string]any, error) { return nil, boom }).Apply(map[string]any{})
	require.ErrorIs(t, err, boom)

	_, err = feature.MapFunc(func(map[string]any) (map[string]any, error) { return nil, nil }).Apply(map[string]any{})
	require.ErrorContains(t, err, "nil object")

	require.NotPanics(t, func() {
		_, err = feature.MapFunc(func(m map[string]any) (map[string]any, error) {
			_ = m["x"].(string) // panics: no such key
			return m, nil
		}).Apply(map[string]any{})
	})
	require.ErrorContains(t, err, "panicked")

	_, err = feature.Drop("x").Apply(nil)
	require.ErrorContains(t, err, "nil object")
}

func TestMigrationStepErrAndString(t *testing.T) {
	t.Parallel()
	for _, s := range []feature.MigrationStep{
		{},
		feature.Rename("", "x"),
		feature.Rename("x", "x"),
		feature.DefaultValue("", 1),
		feature.DefaultValue("ch", make(chan int)),
		feature.Drop(""),
		feature.MapFunc(nil),
	} {
		require.Error(t, s.Err(), s.String())
		_, err := s.Apply(map[string]any{})
		require.Error(t, err, "an invalid step refuses to run")
	}
	require.Equal(t, `rename "a" → "b"`, feature.Rename("a", "b").String())
	require.Equal(t, `default "n" = 1`, feature.DefaultValue("n", 1).String())
	require.Equal(t, `drop "a"`, feature.Drop("a").String())
	require.Equal(t, "map func", feature.MapFunc(func(m map[string]any) (map[string]any, error) { return m, nil }).String())
	require.Equal(t, "invalid step", feature.MigrationStep{}.String())
}
