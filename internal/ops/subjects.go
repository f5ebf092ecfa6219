package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/kumiko-go/kumiko/eventstore"
)

// ---- subject export, forget, rotate-key ----

// The data subjects of personal data (docs/personal-data.md): exporting
// one's data, forgetting one (crypto-shredding) and rotating the
// key-encryption key that wraps their data keys.

func (o *ops) subjectCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "subject",
		Short: "Export or forget a data subject's personal data and rotate the key that wraps the subjects' data keys (KUMIKO_DATA_KEY)",
	}
	root.AddCommand(o.exportCmd(), o.forgetCmd(), o.rotateKeyCmd())
	return root
}

// errExportGeneric refuses subject export in the generic binary.
var errExportGeneric = errors.New("subject export needs the app's own binary: only it knows the read tables whose " +
	"personal fields belong to the export along with the subject's events; run the app binary's `subject export`")

func (o *ops) exportCmd() *cobra.Command {
	return o.subjectVerb(subjectVerb{
		use:   "export",
		short: "Export a data subject of a tenant as JSON: its personal fields in the events and in the read rows",
		long: "Export every personal value of the data subject <subject> of the tenant (GDPR Art. 15 and 20, " +
			"docs/personal-data.md) as indented JSON: {subject, events, rows}. events holds, in id order, each event " +
			"with sealed fields of the subject, open (field names as stored); rows holds the entity read rows' " +
			"personal fields of the subject. The subject is the id its personal data names: an entity's own id for " +
			"Personal fields, the value of the subject field for PersonalOf. A forgotten subject's event fields are " +
			"null and it has no rows; a subject without data exports empty lists. The output is JSON with or without " +
			"--json. Only the app's own binary can run it: it knows the read tables; cmd/kumiko refuses.",
		example: "  subject export 01a22b30-5c2e-7d1a-9c3e-8f4b6a2d1e00 --tenant 01900000-0000-7000-8000-000000000001 > export.json",
		generic: errExportGeneric,
		run: func(ctx context.Context, c *conn, out io.Writer, t uuid.UUID, subject string) error {
			exp, err := c.disp.ExportSubject(ctx, t, subject)
			if err != nil {
				return err
			}
			return writeJSON(out, exp)
		},
	})
}

// subjectVerb is a command on one data subject of a tenant that only an
// app's own binary runs: `subject <use> <subject> --tenant <uuid>`.
type subjectVerb struct {
	use, short, long, example string
	// generic is the refusal of the generic binary.
	generic error
	run     func(ctx context.Context, c *conn, out io.Writer, tenant uuid.UUID, subject string) error
}

func (o *ops) subjectVerb(v subjectVerb) *cobra.Command {
	var tenant string
	short := v.short
	if o.generic {
		short = strings.ToUpper(v.use[:1]) + v.use[1:] + " a data subject (needs the app's own binary, which knows its read tables)"
	}
	cmd := &cobra.Command{
		Use: v.use + " <subject> --tenant <uuid>", Short: short, Long: v.long, Example: v.example,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.generic {
				return v.generic
			}
			t, err := parseTenant(tenant)
			if err != nil {
				return err
			}
			subject := args[0] // the executor validates it
			return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error { return v.run(ctx, c, out, t, subject) })
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant UUID the subject's data belongs to (required)")
	return cmd
}

// errForgetGeneric refuses subject forget in the generic binary.
var errForgetGeneric = errors.New("subject forget needs the app's own binary: only it knows the read tables whose " +
	"personal fields must be set to null along with the subject's data key; run the app binary's `subject forget`")

func (o *ops) forgetCmd() *cobra.Command {
	return o.subjectVerb(subjectVerb{
		use:   "forget",
		short: "Forget a data subject of a tenant: delete its data key and null its personal fields in the read rows",
		long: "Forget the data subject <subject> of the tenant (crypto-shredding, docs/personal-data.md), in one " +
			"transaction: its data key is deleted, so its sealed personal values in events and snapshots read as null " +
			"from then on, and the personal fields of the entity read rows that belong to it are set to null. The " +
			"subject is the id its personal data names: an entity's own id for Personal fields, the value of the " +
			"subject field for PersonalOf. With REDIS_URL set, the cached responses of the requests that wrote the " +
			"subject's personal data are removed from the idempotency store after the commit (without it they expire " +
			"after the store's TTL, 24 hours by default). It cannot be undone. It answers the same whether or not the subject had " +
			"data, and forgetting it again changes nothing. Only the app's own binary can run it: it knows the read " +
			"tables; cmd/kumiko refuses.",
		example: "  subject forget 01a22b30-5c2e-7d1a-9c3e-8f4b6a2d1e00 --tenant 01900000-0000-7000-8000-000000000001",
		generic: errForgetGeneric,
		run: func(ctx context.Context, c *conn, out io.Writer, t uuid.UUID, subject string) error {
			closeRedis, err := c.forgetRecords()
			if err != nil {
				return err
			}
			defer closeRedis()
			if err := c.disp.ForgetSubject(ctx, t, subject); err != nil {
				return err
			}
			if o.json {
				return writeJSON(out, map[string]any{"tenant": t, "subject": subject, "forgotten": true})
			}
			_, err = fmt.Fprintf(out, "forgot subject %q of tenant %s: its data key is deleted and its personal fields in the read rows are null\n", subject, t)
			return err
		},
	})
}

func (o *ops) rotateKeyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rotate-key",
		Short: "Re-wrap every data subject's data key with the current key-encryption key (after a KUMIKO_DATA_KEY rotation)",
		Long: "Re-wrap every data subject's data key that a previous key-encryption key (KEK) wrapped with the current " +
			"one, a page per transaction, then drop the previous KEKs' start checks. Before it, set " +
			"KUMIKO_DATA_KEY=<new>,<previous> (the new KEK first, base64 of 32 random bytes each) and restart the " +
			"app's processes with it, so that every process opens keys wrapped by either; after it, remove the " +
			"previous KEK from KUMIKO_DATA_KEY. The personal values themselves are not re-encrypted: their data " +
			"keys stay the same. Safe to run while the app runs and to run again. It fails, re-wrapping nothing " +
			"more, when a data key does not open with the configured KEKs.",
		Example: "  KUMIKO_DATA_KEY=\"$NEW_KEY,$OLD_KEY\" subject rotate-key",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
				where := "KUMIKO_DATA_KEY"
				if c.cfg.DataKeys != nil {
					where = "the key provider (Config.DataKeys)"
				}
				if c.keys == nil {
					return errors.New("no data key is configured: set KUMIKO_DATA_KEY to the new key-encryption key " +
						"followed by the previous one (<new>,<previous>, base64 of 32 random bytes each)")
				}
				n, err := c.store.RotateKeys(ctx)
				if errors.Is(err, eventstore.ErrDataKey) {
					err = fmt.Errorf("%w\n%s must hold the new key-encryption key first and every previous one after it "+
						"(<new>,<previous>); %d data keys were re-wrapped before this, and running it again goes on", err, where, n)
				}
				if err != nil {
					return err
				}
				if o.json {
					return writeJSON(out, map[string]any{"rewrapped": n, "keyId": c.keys.KeyID()})
				}
				_, err = fmt.Fprintf(out, "re-wrapped %d data keys with key-encryption key %s; every data key is wrapped by it now, "+
					"so the previous key can be removed from %s\n", n, c.keys.KeyID(), where)
				return err
			})
		},
	}
}
