package jobs

import "github.com/jackc/pgx/v5"

// The statements of this package on River's tables (Migrate creates them
// with River's own migrator). River's client sends its own; these are the
// few the framework adds.

// lockAttemptSQL locks a job's row in schema until the end of the
// transaction and reads whether the job is still running in attempt $2:
// not rescued and run again, finished or cancelled meanwhile.
func lockAttemptSQL(schema string) string {
	return `SELECT state = 'running' AND attempt = $2 FROM ` + pgx.Identifier{schema, "river_job"}.Sanitize() + ` WHERE id = $1 FOR UPDATE`
}
