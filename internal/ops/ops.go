package ops

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/kumiko-go/kumiko/consumer"
	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	khttp "github.com/kumiko-go/kumiko/http"
	"github.com/kumiko-go/kumiko/integration"
	"github.com/kumiko-go/kumiko/internal/migrations"
	"github.com/kumiko-go/kumiko/internal/pguuid"
	"github.com/kumiko-go/kumiko/jobs"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// cliUser is the user id the ops commands act as when they go through the
// pipeline (events asof of an entity).
const cliUser = "kumiko-cli"

// commands returns the operations commands of a kumiko binary: migrate,
// consumer, inspect, events (tail, prune, and with features asof), token,
// subject (export and forget, which need features, and rotate-key), and
// with features project and snapshot. With features they work with the
// app's registry (upcasting, read tables, entity state); with none (nil)
// they are the generic commands of cmd/kumiko, which see events as stored.
//
// Every command takes --database-url and --schema (else Config, else
// DATABASE_URL and KUMIKO_SCHEMA, else the development defaults Main uses)
// and --json for machine-readable output. Failures return an error, which
// Execute turns into a non-zero exit.
func commands(app App) []*cobra.Command {
	o := &ops{app: app, features: app.Features, generic: app.Features == nil}
	cmds := []*cobra.Command{
		o.migrateCmd(),
		o.consumerCmd(),
		o.inspectCmd(),
		o.eventsCmd(),
		o.tokenCmd(),
		o.subjectCmd(),
	}
	if !o.generic {
		cmds = append(cmds, o.projectCmd(), o.snapshotCmd(), o.integrationCmd(), o.jobCmd(), o.openapiCmd())
	}
	for _, c := range cmds {
		f := c.PersistentFlags()
		f.StringVar(&o.databaseURL, "database-url", "", "PostgreSQL connection URL (default: env DATABASE_URL, else the app's development database on the local server)")
		if o.generic {
			f.StringVar(&o.appName, "app", "", "the app whose development database to use without a database URL: the one its binary creates, kumiko_<app> (default: env KUMIKO_APP, else database kumiko)")
		}
		f.StringVar(&o.schema, "schema", "", "schema holding the kumiko tables (default: env KUMIKO_SCHEMA, else public)")
		f.BoolVar(&o.json, "json", false, "print JSON for scripts instead of tables")
	}
	return cmds
}

// ops holds the shared flags and configuration of the ops commands.
type ops struct {
	app         App
	features    []*feature.Feature
	generic     bool
	databaseURL string
	appName     string // the generic binary's --app
	schema      string
	json        bool
}

// conn is an opened database: the pool, the store (with keys, its
// key-encryption keys of personal data, nil when none is configured) and,
// with features, the registry and the executor.
type conn struct {
	cfg   Settings
	pool  *pgxpool.Pool
	store *eventstore.Store
	keys  eventstore.KeyProvider
	reg   *registry.Registry
	disp  *pipeline.Executor
}

func (c *conn) close() { c.store.Close(); c.pool.Close() }

// config resolves the connection settings: flags, then Config, then the
// environment, then the development defaults.
func (o *ops) config(ctx context.Context) (Settings, error) {
	cfg := o.app.resolve(Settings{DatabaseURL: o.databaseURL, Schema: o.schema})
	if cfg.DatabaseURL == "" {
		if o.generic {
			// The database the app's own binary would use: both agree.
			name := o.appName
			if name == "" {
				name = cmp.Or(os.Getenv("KUMIKO_APP"), defaultName)
			}
			cfg.DatabaseURL = devDatabaseURL(name)
		} else {
			cfg.DatabaseURL = devDatabaseURL(cfg.Name)
			if err := createDevDatabase(ctx, cfg.DatabaseURL); err != nil {
				return cfg, err
			}
		}
	}
	return cfg, nil
}

// open compiles the features, then connects (checking the database
// answers) and wires the store, and with features the executor. Invalid
// features fail before anything touches the database. It does not migrate.
func (o *ops) open(ctx context.Context) (*conn, error) {
	var (
		reg *registry.Registry
		err error
	)
	if !o.generic {
		if reg, err = registry.Build(o.features...); err != nil {
			return nil, err
		}
	}
	cfg, err := o.config(ctx)
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("database URL %s: %w", redactURL(cfg.DatabaseURL), err)
	}
	pc.MaxConns = 4
	pc.AfterConnect = pguuid.AfterConnect
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("database %s: %w", redactURL(cfg.DatabaseURL), err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	err = pool.Ping(pingCtx)
	cancel()
	if err != nil {
		pool.Close()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "3D000" { // invalid_catalog_name
			return nil, fmt.Errorf("database %s does not exist: start the app once (its serve or migrate creates "+
				"its development database) or point --database-url (DATABASE_URL) at the app's database", redactURL(cfg.DatabaseURL))
		}
		return nil, fmt.Errorf("database %s is unreachable: %w", redactURL(cfg.DatabaseURL), err)
	}
	sc := eventstore.Config{Schema: cfg.Schema, Logger: cfg.Logger, Keys: cfg.DataKeys}
	if sc.Keys == nil && cfg.DataKey != "" {
		if sc.Keys, err = eventstore.ParseLocalKeys(cfg.DataKey); err != nil {
			pool.Close()
			return nil, fmt.Errorf("KUMIKO_DATA_KEY: %w", err)
		}
	}
	if reg != nil {
		sc.Upcaster = reg
	}
	store, err := eventstore.New(pool, sc)
	if err != nil {
		pool.Close()
		return nil, err
	}
	c := &conn{cfg: cfg, pool: pool, store: store, keys: sc.Keys, reg: reg}
	if reg != nil {
		if c.disp, err = pipeline.New(reg, store, pipeline.Config{Logger: cfg.Logger}); err != nil {
			c.close()
			return nil, err
		}
		if defs := c.disp.JobDefinitions(); len(defs) > 0 {
			r, err := jobs.New(store, jobs.Config{Logger: cfg.Logger}, defs...)
			if err != nil {
				c.close()
				return nil, err
			}
			c.disp.UseJobs(r)
		}
	}
	return c, nil
}

// run opens the database, runs fn and closes it.
func (o *ops) run(cmd *cobra.Command, fn func(ctx context.Context, c *conn, out io.Writer) error) error {
	ctx := cmd.Context()
	c, err := o.open(ctx)
	if err != nil {
		return err
	}
	defer c.close()
	return cliError(explainMissingTables(c.cfg, fn(ctx, c, cmd.OutOrStdout())))
}

// explainMissingTables turns "relation does not exist" into what it almost
// always means on a terminal: the wrong database or schema, or one never
// migrated.
func explainMissingTables(cfg Settings, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42P01" { // undefined_table
		return err
	}
	return fmt.Errorf("schema %s of database %s has no kumiko tables (%s): run migrate first, or point "+
		"--database-url (DATABASE_URL) and --schema (KUMIKO_SCHEMA) at the app's database", cfg.Schema, redactURL(cfg.DatabaseURL), pgErr.Message)
}

// cliError turns an error that carries the error contract (Code, Reason,
// Detail: the pipeline's, the consumer operations', the event store's) into
// its client-facing sentence with its code and reason, which reads better on
// a terminal than the full chain.
func cliError(err error) error {
	var ce interface {
		Code() string
		Reason() string
		Detail() string
	}
	if err == nil || !errors.As(err, &ce) {
		return err
	}
	msg := ce.Code()
	if ce.Reason() != "" && ce.Reason() != ce.Code() {
		msg = ce.Reason()
	}
	if ce.Detail() != "" {
		msg += ": " + ce.Detail()
	}
	if f, ok := ce.(interface{ Fields() []registry.FieldError }); ok {
		for _, f := range f.Fields() {
			msg += fmt.Sprintf("\n  %s: %s", f.Path, f.Message)
		}
	}
	return errors.New(msg)
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newTable(out io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
}

// ---- migrate ----

func (o *ops) migrateCmd() *cobra.Command {
	short := "Apply the embedded schema migrations (safe to run from many processes at once)"
	if !o.generic {
		short = "Apply the event store migrations and create the app's read tables"
	}
	return &cobra.Command{
		Use:   "migrate",
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
				var (
					applied []int                // the event store's, as before the tables moved
					owned   = map[string][]int{} // the other owners'
				)
				migrated, err := migrations.All(ctx, c.store)
				if err != nil {
					return err
				}
				for _, m := range migrated {
					if m.Owner == "eventstore" {
						applied = m.Versions
					} else {
						owned[m.Owner] = m.Versions
					}
				}
				if c.disp != nil {
					if err := c.disp.EnsureSchema(ctx); err != nil {
						return err
					}
				}
				if o.json {
					if applied == nil {
						applied = []int{}
					}
					return writeJSON(out, map[string]any{"schema": c.cfg.Schema, "applied": applied, "owned": owned, "readTables": c.disp != nil})
				}
				if len(applied) == 0 && len(owned) == 0 {
					fmt.Fprintf(out, "schema %s is up to date\n", c.cfg.Schema)
				}
				for _, v := range applied {
					fmt.Fprintf(out, "applied migration %d\n", v)
				}
				for _, owner := range slices.Sorted(maps.Keys(owned)) {
					for _, v := range owned[owner] {
						fmt.Fprintf(out, "applied %s migration %d\n", owner, v)
					}
				}
				if c.disp != nil {
					fmt.Fprintf(out, "read tables of %s are in place\n", c.cfg.Name)
				}
				return nil
			})
		},
	}
}

// ---- consumer ----

func (o *ops) consumerCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "consumer",
		Short: "List and operate the event consumers (projections, SSE feeds, the jobs trigger): shards, parked streams, reset, repartition",
	}
	root.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List every consumer shard with its cursor, lag and status",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
				list, err := consumer.NewOps(c.store).List(ctx)
				if err != nil {
					return err
				}
				if o.json {
					return writeJSON(out, list)
				}
				if len(list) == 0 {
					fmt.Fprintln(out, "no consumers")
					return nil
				}
				return printConsumers(out, list...)
			})
		},
	})
	var instance string
	op := func(use, short string, fn func(*consumer.Ops, context.Context, string, string) (consumer.ShardStatus, error), verb string) *cobra.Command {
		cmd := &cobra.Command{
			Use:   use + " <name>",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
					st, err := fn(consumer.NewOps(c.store), ctx, args[0], instance)
					if err != nil {
						return err
					}
					if o.json {
						return writeJSON(out, st)
					}
					if verb != "" {
						fmt.Fprintf(out, "consumer %s/%s %s\n", st.Name, st.InstanceID, verb)
					}
					return printConsumers(out, st)
				})
			},
		}
		cmd.Flags().StringVar(&instance, "instance", "", "instance id of a per-instance consumer's shard (default: the shared shard)")
		return cmd
	}
	root.AddCommand(
		op("status", "Show one consumer shard", (*consumer.Ops).Status, ""),
		op("restart", "Bring a dead shard back to idle; it retries the event that failed", (*consumer.Ops).Restart, "restarted"),
		op("skip", "Move a dead or idle shard's cursor past the next event; resume an expired one with the oldest retained event", (*consumer.Ops).Skip, "skipped"),
		op("disable", "Stop delivering to an idle, dead or expired shard", (*consumer.Ops).Disable, "disabled"),
		op("enable", "Resume a disabled shard from its cursor", (*consumer.Ops).Enable, "enabled"),
		o.consumerGCCmd(),
		o.parkedCmd(),
		o.parkedActionCmd("retry", "Ask for a parked stream to be retried from its failing event (the consumer's next pass does it)", (*consumer.Ops).RetryParked),
		o.parkedActionCmd("skip", "Ask for a parked stream's failing event to be skipped (the consumer's next pass does it)", (*consumer.Ops).SkipParked),
		o.resetCmd(),
		o.repartitionCmd(),
	)
	return root
}

func (o *ops) consumerGCCmd() *cobra.Command {
	var opts consumer.GCOptions
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove the per-instance shards of stale instances (processes gone for good)",
		Long: "Remove the per-instance consumer shards and the liveness records of instances whose last beat " +
			"is older than --stale-after (default: each instance's own threshold, Config.InstanceStaleAfter). " +
			"An instance is never taken for stale before three of its beats are missing, and shared shards " +
			"are never touched. --unknown also removes the shards of instances with no liveness record " +
			"(processes of a version before the beat); use it once every running process is upgraded.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.StaleAfter < 0 {
				return errors.New("--stale-after must be positive")
			}
			return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
				res, err := consumer.NewOps(c.store).CollectStale(ctx, opts)
				if err != nil {
					return err
				}
				if o.json {
					return writeJSON(out, map[string]any{"instances": res.Instances, "shards": res.Shards, "dryRun": opts.DryRun})
				}
				if len(res.Instances) == 0 {
					fmt.Fprintln(out, "no stale instances")
					return nil
				}
				verb := "removed"
				if opts.DryRun {
					verb = "would remove (dry run)"
				}
				fmt.Fprintf(out, "%s %d shards of %d stale instances: %s\n", verb, res.Shards, len(res.Instances), strings.Join(res.Instances, ", "))
				return nil
			})
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&opts.StaleAfter, "stale-after", 0, "an instance is stale when its last beat is older than this (default: its own threshold)")
	fl.BoolVar(&opts.DryRun, "dry-run", false, "report what would be removed, remove nothing")
	fl.BoolVar(&opts.Unknown, "unknown", false, "also remove the shards of instances with no liveness record")
	return cmd
}

func printConsumers(out io.Writer, list ...consumer.ShardStatus) error {
	w := newTable(out)
	fmt.Fprintln(w, "NAME\tINSTANCE\tPARTITION\tOWNER\tLIVENESS\tSTATUS\tCURSOR\tHEAD\tLAG\tLAG(s)\tGAP WAIT(s)\tGAP BACKENDS\tATTEMPTS\tPARKED\tSTUCK\tUPDATED\tLAST ERROR")
	for _, s := range list {
		lastErr := s.LastError
		if lastErr == "" {
			lastErr = "-"
		}
		lastErr = strings.ReplaceAll(lastErr, "\n", " ")
		backends := "-"
		if len(s.GapBackends) > 0 {
			backends = strings.Trim(strings.Join(strings.Fields(fmt.Sprint(s.GapBackends)), ","), "[]")
		}
		liveness := s.Liveness
		if liveness == "" {
			liveness = "-"
		}
		// A stuck shard: the event its handler runs on, the process
		// running it, since when and for how long.
		stuck := "-"
		if s.StuckSince != nil {
			stuck = fmt.Sprintf("event %d on %s since %s (%.1fs)", s.StuckEventID, s.StuckInstanceID,
				s.StuckSince.UTC().Format(time.RFC3339), s.StuckSeconds)
		}
		// A partition: k/N, and the live process it is assigned to.
		partition := "-"
		if s.Partitions > 0 {
			partition = fmt.Sprintf("%d/%d", s.Partition, s.Partitions)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%.1f\t%.1f\t%s\t%d\t%d\t%s\t%s\t%s\n", s.Name, s.InstanceID, partition,
			cmp.Or(s.Owner, "-"), liveness, s.Status, s.Cursor, s.Head, s.LagEvents, s.LagSeconds, s.GapWaitSeconds, backends, s.Attempts,
			s.Parked, stuck, s.UpdatedAt.UTC().Format(time.RFC3339), lastErr)
	}
	return w.Flush()
}

// ---- inspect ----

func parseTenant(s string) (uuid.UUID, error) {
	if s == "" {
		return uuid.Nil, errors.New("--tenant is required (a UUID)")
	}
	t, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, fmt.Errorf("--tenant %q is not a UUID", s)
	}
	return t, nil
}

func parseID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil || id == uuid.Nil {
		return uuid.Nil, fmt.Errorf("id %q is not a non-nil UUID", s)
	}
	return id, nil
}

// inspect prints the stream's timeline up to asOf (zero = now).
func (o *ops) inspect(ctx context.Context, c *conn, out io.Writer, tenant uuid.UUID, typ string, id uuid.UUID, asOf time.Time) error {
	tl, err := pipeline.Inspect(ctx, c.store, tenant, typ, id, asOf)
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(out, tl)
	}
	return printTimeline(out, tl, o.generic)
}

// parseLookupTarget is parseTarget with --tenant optional: uuid.Nil means
// the tenant is the stream's own, which resolveTenant looks up.
func parseLookupTarget(tenant, id string) (uuid.UUID, uuid.UUID, error) {
	if tenant == "" {
		i, err := parseID(id)
		return uuid.Nil, i, err
	}
	return parseTarget(tenant, id)
}

// resolveTenant is t, or when t is uuid.Nil the tenant the stream id belongs
// to (an operator knows the id, not always its tenant).
func resolveTenant(ctx context.Context, c *conn, t, id uuid.UUID) (uuid.UUID, error) {
	if t != uuid.Nil {
		return t, nil
	}
	return c.store.StreamTenant(ctx, id)
}

// parseTarget parses the --tenant flag and an aggregate id argument.
func parseTarget(tenant, id string) (uuid.UUID, uuid.UUID, error) {
	t, err := parseTenant(tenant)
	if err != nil {
		return uuid.Nil, uuid.Nil, err
	}
	i, err := parseID(id)
	return t, i, err
}

func printTimeline(out io.Writer, tl pipeline.Timeline, generic bool) error {
	archived := "no"
	if tl.Archived {
		archived = "yes"
	}
	fmt.Fprintf(out, "%s %s  tenant %s  version %d  archived %s\n\n", tl.AggregateType, tl.AggregateID, tl.TenantID, tl.Version, archived)
	w := newTable(out)
	if generic {
		fmt.Fprintln(w, "VER\tID\tTYPE\tEV\tCREATED\tBY\tPAYLOAD (raw)")
	} else {
		fmt.Fprintln(w, "VER\tID\tTYPE\tEV\tCREATED\tBY\tPAYLOAD\tSTORED AS")
	}
	for _, e := range tl.Events {
		by := e.CreatedBy
		if by == "" {
			by = "-"
		}
		line := fmt.Sprintf("%d\t%d\t%s\tv%d\t%s\t%s\t%s", e.Version, e.ID, e.Type, e.EventVersion,
			e.CreatedAt.UTC().Format(time.RFC3339Nano), by, compact(e.Payload))
		if !generic {
			stored := "-"
			if e.StoredEventVersion != e.EventVersion || string(e.RawPayload) != string(e.Payload) {
				stored = fmt.Sprintf("v%d %s", e.StoredEventVersion, compact(e.RawPayload))
			}
			line += "\t" + stored
		}
		fmt.Fprintln(w, line)
	}
	return w.Flush()
}

// compact prints JSON on one line.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

func (o *ops) inspectCmd() *cobra.Command {
	var tenant string
	long := "Print a stream's timeline: every event with its version, type, time, author and payload, " +
		"archived streams included."
	if o.generic {
		long += "\n\nThe generic kumiko binary has no app features, so it cannot upcast: payloads are shown " +
			"exactly as stored (raw). Run inspect on the app's own binary to see them upcast to current event versions."
	} else {
		long += " Payloads are upcast to the current event version; STORED AS shows the row as written when it differs."
	}
	cmd := &cobra.Command{
		Use:   "inspect <aggregateType> <id>",
		Short: "Show a stream's events (archived streams included)",
		Long:  long,
		Example: "  inspect task 01a22b30-5c2e-7d1a-9c3e-8f4b6a2d1e00\n" +
			"  inspect task 01a22b30-5c2e-7d1a-9c3e-8f4b6a2d1e00 --tenant 0190a000-0000-7000-8000-00000000000a --json",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, id, err := parseLookupTarget(tenant, args[1])
			if err != nil {
				return err
			}
			return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
				if t, err = resolveTenant(ctx, c, t, id); err != nil {
					return err
				}
				return o.inspect(ctx, c, out, t, args[0], id, time.Time{})
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant UUID the stream belongs to (default: the stream's own, looked up by its id)")
	return cmd
}

// ---- events ----

func (o *ops) eventsCmd() *cobra.Command {
	root := &cobra.Command{Use: "events", Short: "Read the event log"}
	root.AddCommand(o.tailCmd(), o.pruneCmd())
	if !o.generic {
		root.AddCommand(o.asofCmd())
	}
	return root
}

// tailEvent is one line of events tail --json (newline-delimited JSON).
type tailEvent struct {
	ID            int64           `json:"id"`
	TenantID      uuid.UUID       `json:"tenantId"`
	AggregateType string          `json:"aggregateType"`
	AggregateID   uuid.UUID       `json:"aggregateId"`
	Version       int             `json:"version"`
	Type          string          `json:"type"`
	EventVersion  int             `json:"eventVersion"`
	Payload       json.RawMessage `json:"payload"`
	CreatedAt     time.Time       `json:"createdAt"`
	CreatedBy     string          `json:"createdBy"`
}

func (o *ops) tailCmd() *cobra.Command {
	var (
		follow  bool
		types   []string
		aggs    []string
		tenant  string
		after   int64
		last    int
		poll    time.Duration
		afterOK bool
	)
	cmd := &cobra.Command{
		Use:   "tail",
		Short: "Print the newest events (or those after --after); --follow keeps streaming",
		Long: "Print the last --last events of the log (or every event after --after), oldest first, " +
			"optionally filtered by event type, aggregate type and tenant. With --follow it keeps printing " +
			"new events as they commit (LISTEN on the store's channel, plus polling) until interrupted.\n\n" +
			"--json prints one JSON object per line (newline-delimited JSON).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			afterOK = cmd.Flags().Changed("after")
			f := eventstore.ReadFilter{Types: types, AggregateTypes: aggs}
			if tenant != "" {
				t, err := parseTenant(tenant)
				if err != nil {
					return err
				}
				f.TenantID = t
			}
			if last < 0 {
				return errors.New("--last must not be negative")
			}
			return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
				cursor := after
				if !afterOK {
					var err error
					if cursor, err = c.store.TailStart(ctx, f, last); err != nil {
						return err
					}
				}
				p := &tailPrinter{out: out, json: o.json}
				cursor, err := p.print(ctx, c.store, cursor, f, follow)
				if err != nil {
					return err
				}
				if !follow {
					if p.count == 0 && !o.json {
						fmt.Fprintln(out, "no events")
					}
					return nil
				}
				err = followEvents(ctx, c.store, poll, func() error {
					cursor, err = p.print(ctx, c.store, cursor, f, true)
					return err
				})
				if ctx.Err() != nil {
					return nil // interrupted: the normal end of --follow
				}
				return err
			})
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&follow, "follow", "f", false, "keep printing new events until interrupted")
	fl.StringArrayVar(&types, "type", nil, "only this event type (repeatable)")
	fl.StringArrayVar(&aggs, "aggregate-type", nil, "only this aggregate type (repeatable)")
	fl.StringVar(&tenant, "tenant", "", "only this tenant's events (UUID)")
	fl.Int64Var(&after, "after", 0, "print every event after this global position instead of the last ones")
	fl.IntVarP(&last, "last", "n", 20, "how many of the newest events to print first")
	fl.DurationVar(&poll, "poll", time.Second, "with --follow: how often to look for events without a notification")
	return cmd
}

type tailPrinter struct {
	out    io.Writer
	json   bool
	header bool
	count  int
	table  *tabwriter.Writer // the rows of the current print, flushed at its end
}

// print prints the events after cursor and returns the new cursor. With
// settle (following) it prints only settled events (eventstore.Tail), so a
// later call never misses an event that commits late; without, it prints
// what is visible now.
func (p *tailPrinter) print(ctx context.Context, store *eventstore.Store, cursor int64, f eventstore.ReadFilter, settle bool) (int64, error) {
	var err error
	if settle {
		cursor, err = store.Tail(ctx, cursor, f, p.event)
	} else {
		for e, rerr := range store.ReadAll(ctx, cursor, f) {
			if err = rerr; err == nil {
				err = p.event(e)
			}
			if err != nil {
				break
			}
			cursor = e.ID
		}
	}
	if p.table != nil {
		err = errors.Join(err, p.table.Flush())
		p.table = nil
	}
	return cursor, err
}

// event prints one event: a JSON line, or a table row.
func (p *tailPrinter) event(e eventstore.Event) error {
	p.count++
	if p.json {
		b, err := json.Marshal(tailEvent{
			ID: e.ID, TenantID: e.TenantID, AggregateType: e.AggregateType, AggregateID: e.AggregateID,
			Version: e.Version, Type: e.Type, EventVersion: e.EventVersion, Payload: json.RawMessage(compact(e.Payload)),
			CreatedAt: e.CreatedAt, CreatedBy: e.CreatedBy,
		})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.out, "%s\n", b)
		return err
	}
	if p.table == nil {
		p.table = newTable(p.out)
		if !p.header {
			fmt.Fprintln(p.table, "ID\tCREATED\tTENANT\tAGGREGATE\tVER\tTYPE\tPAYLOAD")
			p.header = true
		}
	}
	_, err := fmt.Fprintf(p.table, "%d\t%s\t%s\t%s/%s\t%d\t%s v%d\t%s\n", e.ID, e.CreatedAt.UTC().Format(time.RFC3339Nano), e.TenantID,
		e.AggregateType, e.AggregateID, e.Version, e.Type, e.EventVersion, compact(e.Payload))
	return err
}

// followEvents calls read, then again whenever the store announces new
// events (eventstore.Listen) and at least every poll, until ctx ends or read
// fails.
func followEvents(ctx context.Context, store *eventstore.Store, poll time.Duration, read func() error) error {
	if poll <= 0 {
		poll = time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	wake := make(chan struct{}, 1)
	listening := make(chan struct{})
	go func() {
		defer close(listening)
		store.Listen(ctx, func() {
			select {
			case wake <- struct{}{}:
			default: // a read is already due
			}
		})
	}()
	defer func() { cancel(); <-listening }()
	timer := time.NewTimer(poll)
	defer timer.Stop()
	for {
		if err := read(); err != nil {
			return err
		}
		timer.Reset(poll)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		case <-timer.C:
		}
	}
}

func (o *ops) asofCmd() *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:     "asof <aggregateType> <id> <time>",
		Example: "  events asof task 01a22b30-5c2e-7d1a-9c3e-8f4b6a2d1e00 2026-11-24T09:00:00Z",
		Short:   "Show an aggregate as it was at a time (RFC 3339)",
		Long: "For an entity: its state at that time, folded from its events through the app's detail query " +
			"(run as an internal admin user of the tenant). For other aggregate types: the stream's events up to that time.",
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, id, err := parseLookupTarget(tenant, args[1])
			if err != nil {
				return err
			}
			at, err := time.Parse(time.RFC3339Nano, args[2])
			if err != nil {
				return fmt.Errorf("time %q is not RFC 3339 (e.g. 2025-01-31T12:00:00Z)", args[2])
			}
			return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
				if t, err = resolveTenant(ctx, c, t, id); err != nil {
					return err
				}
				if h, ok := detailHandler(c.reg, args[0]); ok {
					return o.entityAsOf(ctx, c, out, h, t, args[0], id, at)
				}
				return o.inspect(ctx, c, out, t, args[0], id, at)
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant UUID the aggregate belongs to (default: the aggregate's own, looked up by its id)")
	return cmd
}

func (o *ops) snapshotCmd() *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "snapshot <entity> <id>",
		Short: "Fold an entity's stream and store a snapshot at its head",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, id, err := parseTarget(tenant, args[1])
			if err != nil {
				return err
			}
			return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
				v, err := c.disp.SnapshotEntity(ctx, t, args[0], id)
				if err != nil {
					return err
				}
				if o.json {
					return writeJSON(out, map[string]any{"aggregateType": args[0], "aggregateId": id, "version": v})
				}
				_, err = fmt.Fprintf(out, "snapshot of %s %s at version %d\n", args[0], id, v)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant UUID the entity belongs to (required)")
	return cmd
}

// detailHandler is the detail query of entity typ, when it has one.
func detailHandler(reg *registry.Registry, typ string) (registry.Handler, bool) {
	e, ok := reg.Entity(typ)
	if !ok || !slices.Contains(e.Verbs(), registry.VerbDetail) {
		return registry.Handler{}, false
	}
	return reg.Handler(registry.VerbDetail.HandlerName(e.Name()))
}

func (o *ops) entityAsOf(ctx context.Context, c *conn, out io.Writer, h registry.Handler, tenant uuid.UUID, typ string, id uuid.UUID, at time.Time) error {
	// The handler's roles see the row; the tenant admin role sees the
	// fields restricted to it.
	roles := append(h.Access.RoleNames(), c.cfg.AdminRole)
	caller := pipeline.Caller{
		User:      feature.User{ID: cliUser, TenantID: tenant, Roles: roles, Authenticated: true},
		RequestID: "cli-" + uuid.NewString(),
	}
	payload, _ := json.Marshal(map[string]any{"id": id, "asOf": at.Format(time.RFC3339Nano)})
	res, err := c.disp.Query(ctx, caller, pipeline.Request{Type: h.Name, Payload: payload})
	if err != nil {
		return err
	}
	if res == nil {
		return fmt.Errorf("not found: no %s %s in tenant %s as of %s (missing, not yet created, deleted or archived)",
			typ, id, tenant, at.Format(time.RFC3339))
	}
	if o.json {
		return writeJSON(out, res)
	}
	row, ok := res.(map[string]any)
	if !ok {
		return writeJSON(out, res)
	}
	fmt.Fprintf(out, "%s %s  tenant %s  as of %s\n\n", typ, id, tenant, at.Format(time.RFC3339Nano))
	keys := make([]string, 0, len(row))
	for k := range row {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	w := newTable(out)
	fmt.Fprintln(w, "FIELD\tVALUE")
	for _, k := range keys {
		v := row[k]
		var s string
		switch v := v.(type) {
		case nil:
			s = "-"
		case string:
			s = v
		default:
			b, _ := json.Marshal(v)
			s = string(b)
		}
		fmt.Fprintf(w, "%s\t%s\n", k, s)
	}
	return w.Flush()
}

// ---- token ----

// openapiCmd prints the OpenAPI 3.1 document of the app's API, the one
// GET /api/openapi.json serves, without a database: for client generators.
func (o *ops) openapiCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "openapi",
		Short: "Print the OpenAPI 3.1 document of the app's HTTP API (what GET /api/openapi.json serves)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			reg, err := registry.Build(o.features...)
			if err != nil {
				return err
			}
			doc, err := khttp.OpenAPI(reg, o.app.resolve(Settings{}).Name)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", doc)
			return err
		},
	}
}

func (o *ops) tokenCmd() *cobra.Command {
	var (
		user, tenant string
		roles        []string
		ttl          time.Duration
	)
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Issue a development JWT (HS256, signed with KUMIKO_JWT_SECRET or the development secret, with KUMIKO_JWT_ISSUER and KUMIKO_JWT_AUDIENCE when set)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := o.app.resolve(Settings{})
			if !cmd.Flags().Changed("roles") {
				roles = []string{cfg.AdminRole, "User"}
			}
			secret := cfg.JWTSecret
			if secret == "" {
				secret = devJWTSecret
				fmt.Fprintln(cmd.ErrOrStderr(), "no KUMIKO_JWT_SECRET; signing with the development secret")
			}
			tok, err := khttp.IssueToken([]byte(secret), user, tenant, roles, ttl, tokenOptions(cfg)...)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if o.json {
				if roles == nil {
					roles = []string{}
				}
				return writeJSON(out, map[string]any{
					"token": tok, "user": user, "tenant": tenant, "roles": roles,
					"expiresAt": time.Now().Add(ttl).UTC().Truncate(time.Second),
				})
			}
			_, err = fmt.Fprintln(out, tok)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&user, "user", "dev", "user id (the token's subject)")
	fl.StringVar(&tenant, "tenant", devTenant, "tenant UUID")
	fl.StringSliceVar(&roles, "roles", nil, "roles, comma-separated (default: the admin role and User; the operator role sees consumers, projections and metrics)")
	fl.DurationVar(&ttl, "ttl", 24*time.Hour, "how long the token is valid")
	return cmd
}

// isTerminal reports whether f is a character device (a terminal), for
// progress bars.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// ---- project ----

func (o *ops) projectCmd() *cobra.Command {
	root := &cobra.Command{Use: "project", Short: "List projections and rebuild them from the events"}
	statuses := func(ctx context.Context, c *conn) ([]pipeline.ProjectionStatus, error) {
		list, err := c.disp.ProjectionStatuses(ctx)
		if list == nil {
			list = []pipeline.ProjectionStatus{}
		}
		return list, err
	}
	root.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the projections with their status, cursor and lag",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
				list, err := statuses(ctx, c)
				if err != nil {
					return err
				}
				if o.json {
					return writeJSON(out, list)
				}
				if len(list) == 0 {
					fmt.Fprintln(out, "no projections")
					return nil
				}
				return printProjections(out, list...)
			})
		},
	}, &cobra.Command{
		Use:   "status <name>",
		Short: "Show one projection",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
				list, err := statuses(ctx, c)
				if err != nil {
					return err
				}
				i := slices.IndexFunc(list, func(s pipeline.ProjectionStatus) bool { return s.Name == args[0] })
				if i < 0 {
					return fmt.Errorf("not found: no projection %s", args[0])
				}
				if o.json {
					return writeJSON(out, list[i])
				}
				return printProjections(out, list[i])
			})
		},
	})
	var quarantine bool
	rebuild := &cobra.Command{
		Use:   "rebuild <name>",
		Short: "Rebuild a projection from the events into a shadow table and swap it in (no downtime)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
				return o.rebuildProjection(ctx, cmd, c, out, args[0], quarantine)
			})
		},
	}
	rebuild.Flags().BoolVar(&quarantine, "quarantine", false, "skip events whose apply fails (recorded in kumiko_projection_quarantine) instead of failing")
	root.AddCommand(rebuild)
	return root
}

func printProjections(out io.Writer, list ...pipeline.ProjectionStatus) error {
	w := newTable(out)
	fmt.Fprintln(w, "NAME\tKIND\tSTATUS\tCURSOR\tHEAD\tLAG\tLAST REBUILD\tLAST ERROR")
	for _, s := range list {
		last, lastErr := "-", "-"
		if s.LastRebuildAt != nil {
			last = s.LastRebuildAt.UTC().Format(time.RFC3339)
		}
		if s.LastError != "" {
			lastErr = strings.ReplaceAll(s.LastError, "\n", " ")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", s.Name, s.Kind, s.Status, s.Cursor, s.Head, s.Lag, last, lastErr)
	}
	return w.Flush()
}

// progress reports a long operation: a bar redrawn in place on a terminal,
// else a plain line at most every progressEvery.
type progress struct {
	out   io.Writer
	label string
	tty   bool
	last  time.Time
	drawn bool
}

const progressEvery = 2 * time.Second

func newProgress(out io.Writer, label string) *progress {
	f, ok := out.(*os.File)
	return &progress{out: out, label: label, tty: ok && isTerminal(f)}
}

func (p *progress) report(done, total int64) {
	now := time.Now()
	if p.tty {
		const width = 30
		frac := 1.0
		if total > 0 {
			frac = min(float64(done)/float64(total), 1)
		}
		n := int(frac * width)
		fmt.Fprintf(p.out, "\r%s [%s%s] %3.0f%% %d/%d events", p.label, strings.Repeat("#", n), strings.Repeat(".", width-n), frac*100, done, total)
		p.drawn = true
		return
	}
	if now.Sub(p.last) < progressEvery && done < total {
		return
	}
	p.last = now
	fmt.Fprintf(p.out, "%s: %d/%d events\n", p.label, done, total)
}

func (p *progress) done() {
	if p.tty && p.drawn {
		fmt.Fprintln(p.out)
	}
}

// ---- events prune ----

func (o *ops) pruneCmd() *cobra.Command {
	var (
		olderThan string
		types     []string
		dryRun    bool
	)
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Remove old events of the named aggregate types (refused while a consumer still needs them)",
		Long: "Remove the events of the aggregate types named by --types created before --older-than " +
			"(a duration such as 720h or 30d, counted back from now, or an RFC 3339 time). It refuses, " +
			"removing nothing, while a consumer that is not disabled has not processed them. Snapshots and " +
			"archive markers are kept. Published integration messages (" + pipeline.MessageStream + ") go only once the " +
			"integration relay has passed them. --dry-run counts without removing, and says which consumer would refuse a real run.",
		Example: "  events prune --types task --older-than 720h --dry-run\n" +
			"  events prune --types task,audit --older-than 2026-01-01T00:00:00Z\n" +
			"  events prune --types " + pipeline.MessageStream + " --older-than 7d",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			before, err := parseOlderThan(olderThan, time.Now())
			if err != nil {
				return err
			}
			if len(types) == 0 {
				return errors.New("--types is required: the aggregate types whose events to remove")
			}
			return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
				p := newProgress(cmd.ErrOrStderr(), "prune")
				if p.tty {
					fmt.Fprintf(p.out, "pruning events of %s created before %s…", strings.Join(types, ", "), before.UTC().Format(time.RFC3339))
					p.drawn = true
				}
				opts := eventstore.PruneOptions{OlderThan: before, AggregateTypes: types, DryRun: dryRun}
				if slices.Contains(types, pipeline.MessageStream) {
					opts.Guard = integration.PruneGuard(c.store) // only what the relay passed
				}
				res, err := consumer.NewOps(c.store).PruneEvents(ctx, opts)
				p.done()
				var refused *consumer.Error
				switch {
				case dryRun && errors.As(err, &refused) && errors.Is(err, consumer.ErrLagging):
					// A dry run reports the counts and what would refuse them.
				case err != nil:
					return err
				}
				if o.json {
					v := map[string]any{
						"deleted": res.Deleted, "upTo": res.UpTo, "byType": res.ByType, "dryRun": dryRun,
						"olderThan": before.UTC(),
					}
					if refused != nil {
						v["refusedBy"] = refused.Details()
					}
					return writeJSON(out, v)
				}
				verb := "removed"
				if dryRun {
					verb = "would remove (dry run)"
				}
				fmt.Fprintf(out, "%s %d events created before %s, up to event %d\n", verb, res.Deleted, before.UTC().Format(time.RFC3339), res.UpTo)
				w := newTable(out)
				fmt.Fprintln(w, "AGGREGATE TYPE\tEVENTS")
				for _, t := range types {
					fmt.Fprintf(w, "%s\t%d\n", t, res.ByType[t])
				}
				if err := w.Flush(); err != nil {
					return err
				}
				if refused != nil {
					fmt.Fprintf(out, "a prune now would be refused (%s): %s\n", refused.Reason(), refused.Detail())
				}
				return nil
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&olderThan, "older-than", "", "remove events created before this: a duration back from now (720h, 30d) or an RFC 3339 time (required)")
	fl.StringSliceVar(&types, "types", nil, "aggregate types whose events to remove, comma-separated (required)")
	fl.BoolVar(&dryRun, "dry-run", false, "count what would be removed, remove nothing")
	return cmd
}

// parseOlderThan reads a duration back from now (Go syntax, plus a "d" day
// suffix) or an RFC 3339 time.
func parseOlderThan(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, errors.New("--older-than is required (a duration such as 30d or an RFC 3339 time)")
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n float64
		if _, err := fmt.Sscanf(days, "%g", &n); err == nil && n > 0 {
			return now.Add(-time.Duration(n * float64(24*time.Hour))), nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("--older-than %q is neither a positive duration (720h, 30d) nor an RFC 3339 time", s)
	}
	return now.Add(-d), nil
}
