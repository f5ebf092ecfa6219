package projections_test

import (
	"bytes"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumiko"
	"github.com/kumiko-go/kumiko/kumikotest"
	"github.com/kumiko-go/kumiko/samples/projections"
)

// Sales over HTTP keep the report current in the same transaction; a report
// lost (the table emptied) comes back whole from `project rebuild`.
func TestSalesReport(t *testing.T) {
	t.Parallel()
	srv := kumikotest.NewServer(t, []*feature.Feature{projections.Feature})
	tenant := uuid.New()
	clerk, manager := srv.As(t, tenant, "cy", "Clerk"), srv.As(t, tenant, "max", "Manager")
	for _, s := range []projections.Sale{{Region: "north", Amount: 10}, {Region: "south", Amount: 25.5}, {Region: "north", Amount: 20}} {
		kumikotest.Data[struct{}](clerk.Write("sale.create", s))
	}
	kumikotest.Data[struct{}](srv.As(t, uuid.New(), "zoe", "Clerk").Write("sale.create", projections.Sale{Region: "north", Amount: 1000}))

	want := []projections.RegionTotal{{Region: "north", Sales: 2, Revenue: 30}, {Region: "south", Sales: 1, Revenue: 25.5}}
	require.Equal(t, want, kumikotest.Data[[]projections.RegionTotal](manager.Query("report.sales", projections.ReportQuery{})),
		"the other tenant's sale is not in the report")

	srv.Exec(t, "DELETE FROM sales_by_region")
	require.Empty(t, kumikotest.Data[[]projections.RegionTotal](manager.Query("report.sales", projections.ReportQuery{})))

	cli := kumiko.NewCommand(kumiko.Config{Name: "projections", DatabaseURL: srv.URL, Schema: srv.Schema}, projections.Feature)
	var out bytes.Buffer
	cli.SetOut(&out)
	cli.SetErr(&out)
	cli.SetArgs([]string{"project", "rebuild", "sales_by_region"})
	require.NoError(t, cli.Execute(), out.String())
	require.Contains(t, out.String(), "rebuilt sales_by_region (inline): 4 events applied")

	require.Equal(t, want, kumikotest.Data[[]projections.RegionTotal](manager.Query("report.sales", projections.ReportQuery{})))
}
