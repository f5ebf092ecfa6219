package ops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// ---- consumer parked, retry-parked, skip-parked ----

func (o *ops) parkedCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "parked [name]",
		Short: "List the parked streams (of one consumer, or of all), with the event that failed",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
				list, err := consumer.NewOps(c.store).Parked(ctx, strings.Join(args, ""))
				if err != nil {
					return err
				}
				if o.json {
					return writeJSON(out, list)
				}
				if len(list) == 0 {
					fmt.Fprintln(out, "no parked streams")
					return nil
				}
				return printParked(out, list...)
			})
		},
	}
}

// parkedActionCmd is retry-parked or skip-parked: it records the request,
// which the shard's next pass carries out.
func (o *ops) parkedActionCmd(action, short string, fn func(*consumer.Ops, context.Context, string, string) (consumer.ParkedStream, error)) *cobra.Command {
	return &cobra.Command{
		Use:   action + "-parked <name> <stream>",
		Short: short,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
				p, err := fn(consumer.NewOps(c.store), ctx, args[0], args[1])
				if err != nil {
					return err
				}
				if o.json {
					return writeJSON(out, p)
				}
				fmt.Fprintf(out, "%s of stream %s of consumer %s requested; the next pass of shard %s carries it out\n",
					action, p.Stream, p.Name, p.Shard)
				return printParked(out, p)
			})
		},
	}
}

func printParked(out io.Writer, list ...consumer.ParkedStream) error {
	w := newTable(out)
	fmt.Fprintln(w, "CONSUMER\tSHARD\tSTREAM\tEVENT\tTYPE\tATTEMPTS\tSINCE\tACTION\tERROR")
	for _, p := range list {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", p.Name, p.Shard, p.Stream, p.EventID, p.EventType, p.Attempts,
			p.Since.UTC().Format(time.RFC3339), cmp.Or(p.Action, "-"), strings.ReplaceAll(cmp.Or(p.LastError, "-"), "\n", " "))
	}
	return w.Flush()
}

// ---- consumer reset ----

// resetFlags are the flags of `consumer reset`.
type resetFlags struct {
	to                string
	truncate, rebuild bool
	quarantine        bool
	yes               bool
	by                string
}

func (o *ops) resetCmd() *cobra.Command {
	var f resetFlags
	cmd := &cobra.Command{
		Use:   "reset <name> --to beginning|<event id>|<RFC 3339 time>",
		Short: "Move every shard of a consumer to a position: the events after it are delivered again",
		Long: "Move every shard of the consumer — all its partitions, or its per-instance shards — to one position, " +
			"in one transaction, while processes run, and record who did it (--by, default the OS user). --to is " +
			"beginning, an event id (the last event not delivered again) or an RFC 3339 time (the events created " +
			"at or after it are delivered again).\n\n" +
			"A multi-stream projection with a table resets from the beginning only, with one of --truncate (empty " +
			"its table in the reset's transaction, then every event is applied again) or --rebuild (rebuild it into " +
			"a shadow table and swap it in, as `project rebuild` does). Any other consumer — a side-effect " +
			"projection, the jobs' trigger, a feed — needs --yes: what its handler did outside the database " +
			"happens again for every event delivered again. The generic binary cannot tell the two apart: it " +
			"needs --yes and has no --truncate or --rebuild.",
		Example: "  consumer reset order_totals --to beginning --truncate\n" +
			"  consumer reset mailer --to 2026-11-24T09:00:00Z --yes --by ada",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.to == "" {
				return errors.New("--to is required: beginning, an event id or an RFC 3339 time")
			}
			return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
				return o.reset(ctx, cmd, c, out, args[0], f)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.to, "to", "", "where to move the consumer: beginning, an event id or an RFC 3339 time (required)")
	fl.BoolVar(&f.truncate, "truncate", false, "a projection with a table: empty the table in the reset's transaction (with --to beginning)")
	fl.BoolVar(&f.rebuild, "rebuild", false, "a projection with a table: rebuild it into a shadow table and swap it in (with --to beginning)")
	fl.BoolVar(&f.quarantine, "quarantine", false, "with --rebuild: skip events whose apply fails instead of failing")
	fl.BoolVar(&f.yes, "yes", false, "a consumer without a table: confirm that its effects repeat for the events delivered again")
	fl.StringVar(&f.by, "by", "", "who resets, for the audit record (default: the OS user)")
	return cmd
}

// reset carries out `consumer reset` by the rules of resetCmd's Long.
func (o *ops) reset(ctx context.Context, cmd *cobra.Command, c *conn, out io.Writer, name string, f resetFlags) error {
	cops := consumer.NewOps(c.store)
	to, err := resetPosition(ctx, cops, f.to)
	if err != nil {
		return err
	}
	if err := consumerExists(ctx, cops, name); err != nil {
		return err
	}
	table, err := o.resetTable(c, name, to, f)
	if err != nil {
		return err
	}
	if f.rebuild {
		return o.rebuildProjection(ctx, cmd, c, out, name, f.quarantine)
	}
	opts := consumer.ResetOptions{To: to, Actor: actor(f.by)}
	if table != "" {
		opts.Within = func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "TRUNCATE "+table)
			return err
		}
		opts.Detail = map[string]any{"table": "truncated"}
	}
	res, err := cops.Reset(ctx, name, opts)
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(out, res)
	}
	from := make([]string, 0, len(res.Shards))
	for _, s := range res.Shards {
		from = append(from, fmt.Sprintf("%s from %d", s, res.From[s]))
	}
	fmt.Fprintf(out, "reset consumer %s to %d by %s: %s; %d parked streams dropped\n", res.Name, res.To, opts.Actor,
		strings.Join(from, ", "), res.Unparked)
	if table != "" {
		fmt.Fprintf(out, "table %s truncated\n", table)
	}
	return nil
}

// resetTable applies the reset rules to the consumer name at position to:
// it answers the qualified table to truncate ("" when none) or the
// refusal.
func (o *ops) resetTable(c *conn, name string, to int64, f resetFlags) (string, error) {
	if c.disp == nil {
		switch {
		case f.truncate || f.rebuild:
			return "", invalidReset("--truncate and --rebuild need the app's own binary, which knows its projections' tables")
		case !f.yes:
			return "", unsafeReset(fmt.Sprintf("this binary cannot tell what consumer %s wrote; a reset to %d delivers the events "+
				"after it again and whatever its handler did happens again: confirm with --yes, or reset a projection with "+
				"the app's binary (--truncate or --rebuild)", name, to))
		}
		return "", nil
	}
	msps := c.reg.MSPs()
	if i := slices.IndexFunc(msps, func(m *registry.MSP) bool { return m.Name() == name }); i >= 0 {
		if t, ok := msps[i].Table(); ok {
			if f.truncate == f.rebuild || to != 0 {
				return "", unsafeReset(fmt.Sprintf("consumer %s is the projection of table %s: its rows follow every event "+
					"up to its cursor, so it resets from the beginning with its table: --to beginning with --truncate (empty the "+
					"table and apply every event again) or --rebuild (rebuild it into a shadow table and swap it in)", name, t.Name))
			}
			return pgx.Identifier{c.store.Schema(), t.Name}.Sanitize(), nil
		}
	}
	switch {
	case f.truncate || f.rebuild:
		return "", invalidReset(fmt.Sprintf("consumer %s has no table to truncate or rebuild", name))
	case !f.yes:
		return "", unsafeReset(fmt.Sprintf("consumer %s keeps no table: its handler acts outside the projection tables, "+
			"and a reset to %d delivers the events after it again, so its effects happen again: confirm with --yes", name, to))
	}
	return "", nil
}

func unsafeReset(detail string) error {
	return kumikotype.NewError(kumikotype.CodeUnprocessable, kumikotype.ReasonResetUnsafe, detail, errors.New("consumer reset: "+detail))
}

func invalidReset(detail string) error {
	return kumikotype.NewError(kumikotype.CodeValidation, kumikotype.ReasonInvalidOperation, detail, errors.New("consumer reset: "+detail))
}

// resetPosition resolves --to: beginning is 0, an integer an event id, an
// RFC 3339 time the newest event created before it.
func resetPosition(ctx context.Context, cops *consumer.Ops, to string) (int64, error) {
	if to == "beginning" {
		return 0, nil
	}
	if id, err := strconv.ParseInt(to, 10, 64); err == nil {
		return id, nil
	}
	t, err := time.Parse(time.RFC3339Nano, to)
	if err != nil {
		return 0, fmt.Errorf("--to %q is neither beginning, an event id nor an RFC 3339 time (e.g. 2025-01-31T12:00:00Z)", to)
	}
	return cops.PositionAt(ctx, t)
}

// consumerExists refuses, as the consumer operations do, a name with no
// shard: before the rules judge what it wrote.
func consumerExists(ctx context.Context, cops *consumer.Ops, name string) error {
	list, err := cops.List(ctx)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(list, func(s consumer.ShardStatus) bool { return s.Name == name }) {
		return nil
	}
	return kumikotype.NewError(kumikotype.CodeNotFound, kumikotype.ReasonConsumerNotFound, "no consumer "+name,
		fmt.Errorf("consumer reset %s: %w", name, consumer.ErrNotFound))
}

// actor is who resets or repartitions: by, else the OS user, never empty.
func actor(by string) string {
	if by != "" {
		return by
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	for _, env := range []string{"USER", "LOGNAME"} {
		if v := os.Getenv(env); v != "" {
			return v
		}
	}
	return cliUser
}

// ---- consumer repartition ----

func (o *ops) repartitionCmd() *cobra.Command {
	var (
		wait time.Duration
		by   string
	)
	cmd := &cobra.Command{
		Use:   "repartition <name> <n>",
		Short: "Change a shared consumer's partition count while it runs (1: one shard), keeping each stream's order",
		Long: "Fence the consumer's shards at the cursor furthest ahead, wait (at most --wait) until every shard has " +
			"reached it, then replace them with n partitions starting there, moving the parked streams along, and " +
			"record who did it (--by, default the OS user). Refused, changing nothing, while a shard is dead, disabled " +
			"or expired, or when the shards do not reach the fence in time. The running processes pick the new count up " +
			"by themselves.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil {
				return fmt.Errorf("partition count %q is not a number", args[1])
			}
			return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
				who := actor(by)
				res, err := consumer.NewOps(c.store).Repartition(ctx, args[0], n, consumer.RepartitionOptions{Actor: who, Wait: wait})
				if err != nil {
					return err
				}
				if o.json {
					return writeJSON(out, res)
				}
				fmt.Fprintf(out, "repartitioned consumer %s from %d to %d partitions at event %d by %s\n", res.Name, res.From, res.To, res.Cursor, who)
				return nil
			})
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", time.Minute, "how long the shards may take to reach the fence")
	cmd.Flags().StringVar(&by, "by", "", "who repartitions, for the audit record (default: the OS user)")
	return cmd
}

// rebuildProjection rebuilds the projection name with a progress report on
// stderr and prints the result: `project rebuild` and `consumer reset
// --rebuild`.
func (o *ops) rebuildProjection(ctx context.Context, cmd *cobra.Command, c *conn, out io.Writer, name string, quarantine bool) error {
	p := newProgress(cmd.ErrOrStderr(), "rebuild "+name)
	res, err := c.disp.RebuildProjection(ctx, name, pipeline.RebuildOptions{Progress: p.report, Quarantine: quarantine})
	p.done()
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(out, map[string]any{
			"name": res.Name, "kind": res.Kind, "applied": res.Applied, "quarantined": res.Quarantined,
			"lastEventId": res.LastEventID, "durationMs": res.Duration.Milliseconds(),
		})
	}
	fmt.Fprintf(out, "rebuilt %s (%s): %d events applied, %d quarantined, up to event %d, in %s\n",
		res.Name, res.Kind, res.Applied, res.Quarantined, res.LastEventID, res.Duration.Round(time.Millisecond))
	return nil
}
