// Package projections shows a second read model (level 3): sales are a plain
// CRUD entity, and an inline projection keeps a report — revenue and count
// per region — in the same transaction as every sale. The report is a table
// like any other, and it can be rebuilt from the recorded sales at any time:
// `projections project rebuild sales_by_region`.
package projections

import (
	"github.com/kumiko-go/kumiko/feature"
)

// Sale is the payload of "sale.created": the entity's fields. The report
// decodes only the fields it needs.
type Sale struct {
	Region string  `json:"region"`
	Amount float64 `json:"amount"`
}

// ReportQuery is the input of "report.sales": no parameters.
type ReportQuery struct{}

// RegionTotal is one row of the "report.sales" answer.
type RegionTotal struct {
	Region  string  `json:"region"`
	Sales   int64   `json:"sales"`
	Revenue float64 `json:"revenue"`
}

// Feature records sales and keeps the revenue report.
var Feature = feature.Define("sales", func(r *feature.Registrar) {
	r.Entity("sale", feature.Fields{
		"region":   feature.Enum("north", "south", "east", "west").Required(),
		"amount":   feature.Number().Required(),
		"customer": feature.Text().MaxLen(200),
	})
	r.Crud("sale", feature.Access{Write: feature.Roles("Clerk"), Read: feature.AnyUser()})

	r.Projection("sales_by_region", feature.InlineProjection{
		Source: "sale",
		Table: feature.TableDef{
			Name: "sales_by_region",
			Columns: []feature.Column{
				{Name: "tenant_id", Type: "uuid", NotNull: true},
				{Name: "region", Type: "text", NotNull: true},
				{Name: "sales", Type: "bigint", NotNull: true},
				{Name: "revenue", Type: "numeric", NotNull: true},
			},
			PrimaryKey: []string{"tenant_id", "region"},
			// report reads the rows into RegionTotal: the boot checks it fits.
			Row: RegionTotal{},
		},
		Apply: map[string]feature.ProjectionApplyFunc{"sale.created": addSale},
	})
	feature.HandleQuery(r, "report.sales", feature.Roles("Manager"), report)
})

// addSale adds one sale to its region's row.
func addSale(ctx feature.ProjectionContext, e feature.Event) error {
	s, err := feature.Decode[Sale](e)
	if err != nil {
		return err
	}
	_, err = ctx.DB().Exec(ctx.Context(), `
INSERT INTO `+ctx.Table()+` AS r (tenant_id, region, sales, revenue) VALUES ($1, $2, 1, $3)
ON CONFLICT (tenant_id, region) DO UPDATE SET sales = r.sales + 1, revenue = r.revenue + EXCLUDED.revenue`,
		ctx.Tenant(), s.Region, s.Amount)
	return err
}

// report answers the caller's regions, highest revenue first.
func report(ctx feature.CommandContext, _ ReportQuery) (any, error) {
	return feature.RowsAs[RegionTotal](ctx.QueryProjection("sales_by_region"), feature.ProjectionFilter{OrderBy: "revenue DESC, region"})
}
