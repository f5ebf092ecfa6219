package timetravel_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotest"
	timetravel "github.com/kumiko-go/kumiko/samples/time-travel"
)

// A price changes twice; detail and list with asOf answer each moment's
// price, and a moment before the product existed answers nothing.
func TestPriceAsOf(t *testing.T) {
	t.Parallel()
	srv := kumikotest.NewServer(t, []*feature.Feature{timetravel.Feature})
	mia := srv.As(t, uuid.New(), "mia", "Manager")

	v1 := kumikotest.Data[timetravel.Product](mia.Write("product.create", map[string]any{"name": "Tea", "price": 3.5}))
	v2 := kumikotest.Data[timetravel.Product](mia.Write("product.update",
		map[string]any{"id": v1.ID, "version": 1, "changes": map[string]any{"price": 4}}))
	kumikotest.Data[timetravel.Product](mia.Write("product.update",
		map[string]any{"id": v1.ID, "version": 2, "changes": map[string]any{"price": 4.5}}))

	priceAt := func(at time.Time) *timetravel.Product {
		return kumikotest.Data[*timetravel.Product](mia.Query("product.detail", map[string]any{"id": v1.ID, "asOf": at}))
	}
	require.Equal(t, 3.5, priceAt(v1.UpdatedAt).Price)
	require.Equal(t, 4.0, priceAt(v2.UpdatedAt).Price)
	require.Nil(t, priceAt(v1.UpdatedAt.Add(-time.Microsecond)), "before it was created")

	now := kumikotest.Data[*timetravel.Product](mia.Query("product.detail", map[string]any{"id": v1.ID}))
	require.Equal(t, 4.5, now.Price)

	list := kumikotest.Data[struct {
		Rows []timetravel.Product `json:"rows"`
	}](mia.Query("product.list", map[string]any{"asOf": v2.UpdatedAt}))
	require.Len(t, list.Rows, 1)
	require.Equal(t, 4.0, list.Rows[0].Price)
	require.Equal(t, 2, list.Rows[0].Version)
}
