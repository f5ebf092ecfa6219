package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kumiko-go/kumiko/jobs"
)

// ---- job ----

func (o *ops) jobCmd() *cobra.Command {
	root := &cobra.Command{Use: "job", Short: "List, run, cancel and retry background jobs"}
	var (
		list  jobs.ListParams
		state string
	)
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List jobs, newest first, with state, attempts and last error",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.runJobs(cmd, func(ctx context.Context, r *jobs.Runner, out io.Writer) error {
				if state != "" {
					list.States = strings.Split(state, ",")
				}
				infos, err := r.List(ctx, list)
				if err != nil {
					return err
				}
				if o.json {
					if infos == nil {
						infos = []jobs.Info{}
					}
					return writeJSON(out, infos)
				}
				if len(infos) == 0 {
					fmt.Fprintln(out, "no jobs")
					return nil
				}
				return printJobs(out, infos...)
			})
		},
	}
	listCmd.Flags().StringVar(&list.Name, "name", "", "only this job")
	listCmd.Flags().StringVar(&state, "state", "", "only these states, comma-separated (available, scheduled, running, retryable, completed, cancelled, discarded)")
	listCmd.Flags().IntVar(&list.Limit, "limit", 100, "at most this many jobs")

	var args, tenant, at string
	runCmd := &cobra.Command{
		Use:   "run <name>",
		Short: "Enqueue a job by hand (it runs in a worker or server process)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			return o.runJobs(cmd, func(ctx context.Context, r *jobs.Runner, out io.Writer) error {
				opts := jobs.Options{}
				if tenant != "" {
					id, err := parseTenant(tenant)
					if err != nil {
						return err
					}
					opts.Cause.TenantID = id
				}
				if at != "" {
					t, err := time.Parse(time.RFC3339, at)
					if err != nil {
						return fmt.Errorf("--at: want an RFC 3339 time: %w", err)
					}
					opts.RunAt = t
				}
				e, err := r.Enqueue(ctx, a[0], json.RawMessage(args), opts)
				if err != nil {
					return err
				}
				if o.json {
					return writeJSON(out, map[string]any{"id": e.ID, "name": a[0], "duplicate": e.Duplicate})
				}
				if e.Duplicate {
					fmt.Fprintf(out, "job %s is pending already as job %d\n", a[0], e.ID)
					return nil
				}
				fmt.Fprintf(out, "enqueued %s as job %d\n", a[0], e.ID)
				return nil
			})
		},
	}
	runCmd.Flags().StringVar(&args, "args", "{}", "the job's args, a JSON object")
	runCmd.Flags().StringVar(&tenant, "tenant", "", "tenant uuid the job runs in (default: the system tenant)")
	runCmd.Flags().StringVar(&at, "at", "", "run at this time (RFC 3339) instead of now")

	byID := func(use, short string, op func(*jobs.Runner, context.Context, int64) (jobs.Info, error)) *cobra.Command {
		return &cobra.Command{
			Use:   use + " <id>",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, a []string) error {
				id, err := strconv.ParseInt(a[0], 10, 64)
				if err != nil {
					return fmt.Errorf("job id %q is not a number", a[0])
				}
				return o.runJobs(cmd, func(ctx context.Context, r *jobs.Runner, out io.Writer) error {
					in, err := op(r, ctx, id)
					if err != nil {
						return err
					}
					if o.json {
						return writeJSON(out, in)
					}
					return printJobs(out, in)
				})
			},
		}
	}
	root.AddCommand(listCmd, runCmd,
		byID("show", "Show one job with the error of every failed attempt", (*jobs.Runner).Get),
		byID("cancel", "Cancel a job that has not finished (a running one is told to stop)", (*jobs.Runner).Cancel),
		byID("retry", "Run a job again now: a discarded, cancelled, completed or retrying one", (*jobs.Runner).Retry))
	return root
}

// errNoJobs is the answer of the job commands in an app without jobs.
var errNoJobs = errors.New("the application declares no jobs")

// runJobs opens the database and runs fn on the app's jobs runner, which is
// not started: the commands only enqueue and manage jobs.
func (o *ops) runJobs(cmd *cobra.Command, fn func(ctx context.Context, r *jobs.Runner, out io.Writer) error) error {
	return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
		r := c.disp.Jobs()
		if r == nil {
			return errNoJobs
		}
		return fn(ctx, r, out)
	})
}

func printJobs(out io.Writer, list ...jobs.Info) error {
	w := newTable(out)
	fmt.Fprintln(w, "ID\tNAME\tSTATE\tATTEMPT\tSCHEDULED\tTENANT\tLAST ERROR")
	for _, j := range list {
		lastErr := "-"
		if n := len(j.Errors); n > 0 {
			lastErr = strings.ReplaceAll(j.Errors[n-1].Error, "\n", " ")
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", j.ID, j.Name, j.State, j.Attempt, j.MaxAttempts,
			j.ScheduledAt.UTC().Format(time.RFC3339), j.Cause.TenantID, lastErr)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(list) == 1 && len(list[0].Errors) > 1 {
		for _, e := range list[0].Errors {
			fmt.Fprintf(out, "attempt %d at %s: %s\n", e.Attempt, e.At.UTC().Format(time.RFC3339Nano), e.Error)
		}
	}
	return nil
}
