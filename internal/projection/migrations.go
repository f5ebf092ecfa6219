package projection

import "embed"

// Migrations holds the DDL of the read side's own tables — the projections'
// rebuild state and quarantine — as migrations/NNNN_name.sql files. Their
// versions interleave with the pipeline's: pipeline.Migrate applies both
// sets as one sequence, recorded in kumiko_pipeline_migrations, so that
// databases migrated before the read side had a package of its own stay as
// they are.
//
//go:embed migrations/*.sql
var Migrations embed.FS
