package ops

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kumiko-go/kumiko/integration"
)

// integrationCmd operates the integration events' dead messages, where the
// app's transport keeps them: kumiko_integration_dead in process,
// <app>.dead on RabbitMQ (RABBITMQ_URL).
func (o *ops) integrationCmd() *cobra.Command {
	root := &cobra.Command{Use: "integration", Short: "Operate integration events"}
	dead := &cobra.Command{Use: "dead", Short: "List, retry or drop messages the app's handlers failed on every attempt"}
	root.AddCommand(dead)

	limit := 0
	list := &cobra.Command{
		Use:   "list",
		Short: "List dead messages, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.runDead(cmd, func(ctx context.Context, d integration.DeadLetters, out io.Writer) error {
				msgs, err := d.List(ctx, limit)
				if err != nil {
					return err
				}
				if o.json {
					return writeJSON(out, msgs)
				}
				if len(msgs) == 0 {
					fmt.Fprintln(out, "no dead messages")
					return nil
				}
				w := newTable(out)
				fmt.Fprintln(w, "MESSAGE\tSENT AS\tTYPE\tHANDLER\tTENANT\tATTEMPTS\tDEAD AT\tLAST ERROR\tPAYLOAD")
				for _, m := range msgs {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", m.Message.ID, orDash(m.RawID), m.Message.Type, orDash(m.Handler),
						m.Message.TenantID, m.Attempts, m.DeadAt.Format(time.RFC3339), oneLine(m.LastError), compact(m.Message.Payload))
				}
				return w.Flush()
			})
		},
	}
	list.Flags().IntVar(&limit, "limit", 100, "list at most this many")

	var handler string
	op := func(use, short, done string, fn func(ctx context.Context, d integration.DeadLetters, args []string) error) *cobra.Command {
		cmd := &cobra.Command{
			Use: use + " <message-id>",
			Long: short + ". <message-id> is the MESSAGE column of `integration dead list`, or the id the message was sent with " +
				"(SENT AS) when that is not a UUID.",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return o.runDead(cmd, func(ctx context.Context, d integration.DeadLetters, out io.Writer) error {
					if err := fn(ctx, d, args); err != nil {
						return err
					}
					fmt.Fprintf(out, "message %s %s\n", args[0], done)
					return nil
				})
			},
		}
		cmd.Flags().StringVar(&handler, "handler", "", "only the dead message of this handler (in process; default: every handler)")
		return cmd
	}
	dead.AddCommand(list,
		op("retry", "Hand a dead message to its handlers once more", "retried", func(ctx context.Context, d integration.DeadLetters, args []string) error {
			return d.Retry(ctx, integration.MessageID(args[0]), handler)
		}),
		op("drop", "Delete a dead message for good", "dropped", func(ctx context.Context, d integration.DeadLetters, args []string) error {
			_, err := d.Drop(ctx, integration.MessageID(args[0]), handler)
			return err
		}),
	)
	return root
}

// runDead opens the database and the app's transport and runs fn on the
// dead letters.
func (o *ops) runDead(cmd *cobra.Command, fn func(ctx context.Context, d integration.DeadLetters, out io.Writer) error) error {
	return o.run(cmd, func(ctx context.Context, c *conn, out io.Writer) error {
		cfg := integration.Config{Logger: c.cfg.Logger}
		if c.cfg.RabbitMQURL != "" {
			r, err := integration.NewRabbit(integration.RabbitConfig{URL: c.cfg.RabbitMQURL, Queue: c.cfg.Name, Logger: c.cfg.Logger})
			if err != nil {
				return err
			}
			defer func() { _ = r.Stop(ctx) }()
			cfg.Transport = r
		}
		svc, err := integration.New(c.disp, c.store, cfg)
		if err != nil {
			return err
		}
		return fn(ctx, svc.Dead(), out)
	})
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
