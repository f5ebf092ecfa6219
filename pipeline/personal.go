package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/registry"
)

// personalOf is the eventstore.NewEvent.Personal of an event of type et
// appended to stream: each personal field the payload holds (not null),
// with the id of its data subject — "" for the stream's own, else the value
// of the subject field in the payload or, for an entity's update that does
// not change it, in the entity's row. fields is payload decoded, or nil.
// A personal value whose subject is empty is refused: it could not be
// forgotten.
func (d *Executor) personalOf(ctx context.Context, tx pgx.Tx, et registry.EventType, stream eventstore.Stream, payload json.RawMessage, fields map[string]any) (map[string]string, error) {
	return d.personalFields(ctx, tx, et.Name, et.Entity, et.Personal, stream, payload, fields)
}

// personalFields is personalOf of an event named name with the personal
// fields decl (registry.EventType.Personal, registry.Contract.Personal) of
// entity ("" when none).
func (d *Executor) personalFields(ctx context.Context, tx pgx.Tx, name, entity string, decl map[string]string, stream eventstore.Stream, payload json.RawMessage, fields map[string]any) (map[string]string, error) {
	if len(decl) == 0 {
		return nil, nil
	}
	if fields == nil {
		if err := json.Unmarshal(payload, &fields); err != nil {
			return nil, fmt.Errorf("personal fields of %s: %w", name, err)
		}
	}
	out := map[string]string{}
	for field, subjectField := range decl {
		if fields[field] == nil {
			continue
		}
		if subjectField == "" {
			out[field] = ""
			continue
		}
		subject := subjectText(fields[subjectField])
		if _, given := fields[subjectField]; !given && entity != "" && stream.AggregateID != uuid.Nil {
			var err error
			if subject, err = d.proj.Entity(entity).SubjectOf(ctx, tx, stream.AggregateID, stream.TenantID, subjectField); err != nil {
				return nil, err
			}
		}
		if subject == "" {
			return nil, kumikotype.NewError(kumikotype.CodeValidation, kumikotype.ReasonSubjectMissing,
				fmt.Sprintf("%s is personal data of the subject named by %s, which is empty", field, subjectField), nil).With("field", subjectField)
		}
		out[field] = subject
	}
	return out, nil
}

// subjectText is a subject field's value as a subject id ("" when none).
func subjectText(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// entityPersonal is the eventstore.Snapshot.Personal of an entity's state:
// its personal fields with their subjects as the state holds them; a field
// whose subject the state lacks stays out (its value is null then too,
// since its events were refused).
func entityPersonal(e *registry.Entity, state map[string]any) map[string]string {
	decl := e.Personal()
	if len(decl) == 0 {
		return nil
	}
	out := make(map[string]string, len(decl))
	for field, subjectField := range decl {
		if subjectField == "" {
			out[field] = ""
		} else if s := subjectText(state[subjectField]); s != "" {
			out[field] = s
		}
	}
	return out
}

// maxSubject is the longest subject id, in bytes.
const maxSubject = 200

// ForgetSubject forgets the data subject subject of tenant in one
// transaction (see docs/personal-data.md): its data key is deleted, so its
// sealed values in events and snapshots read as null from then on, and the
// personal fields of entity rows that belong to it are set to null. It
// answers the same whether or not the subject had data.
func (d *Executor) ForgetSubject(ctx context.Context, tenant uuid.UUID, subject string) error {
	err := d.store.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return d.forget(ctx, tx, &Caller{User: feature.User{TenantID: tenant}}, tenant, subject)
	})
	if err != nil {
		return AsError(err)
	}
	return nil
}

// checkSubject refuses a subject id that is empty, too long, not UTF-8
// or holds a NUL (invalid_subject).
func checkSubject(subject string) error {
	if subject == "" || len(subject) > maxSubject || !utf8.ValidString(subject) || strings.ContainsRune(subject, 0) {
		return kumikotype.NewError(kumikotype.CodeValidation, kumikotype.ReasonInvalidSubject,
			fmt.Sprintf("a subject id is 1 to %d bytes of UTF-8 text without NUL", maxSubject), nil)
	}
	return nil
}

// subjectStreams names the stream of a subject's SubjectForgottenEvent:
// one per tenant and subject, derived from both.
var subjectStreams = uuid.MustParse("0190d6c4-7a1e-7000-8000-6b756d696b6f")

// forget is ForgetSubject in tx, as c: the key goes, the entity rows' fields
// are nulled, and feature.SubjectForgottenEvent is appended and applied to
// the inline projections that apply it.
func (d *Executor) forget(ctx context.Context, tx pgx.Tx, c *Caller, tenant uuid.UUID, subject string) error {
	if err := checkSubject(subject); err != nil {
		return err
	}
	if _, err := d.store.ForgetSubjectTx(ctx, tx, tenant, subject); err != nil {
		return err
	}
	for _, e := range d.reg.Entities() {
		// A system stream's keys are the system tenant's, not the caller's.
		if len(e.Personal()) == 0 || e.SystemStream() {
			continue
		}
		if _, err := d.proj.Entity(e.Name()).Forget(ctx, tx, tenant, subject); err != nil {
			return err
		}
	}
	payload, err := json.Marshal(feature.SubjectForgotten{Subject: subject})
	if err != nil {
		return err
	}
	stream := eventstore.Stream{TenantID: tenant, AggregateType: feature.SubjectAggregate,
		AggregateID: uuid.NewSHA1(subjectStreams, []byte(tenant.String()+"\x00"+subject))}
	ev, _, err := d.appendValid(ctx, tx, c, stream, eventstore.AnyVersion, feature.SubjectForgottenEvent, payload, nil, "", nil, false)
	if err != nil {
		return err
	}
	if err := d.proj.ApplyEverywhere(ctx, tx, ev); err != nil {
		return err
	}
	for _, step := range d.forgetSteps {
		if err := step(ctx, tx, tenant, subject); err != nil {
			return err
		}
	}
	return nil
}

// ForgetStep is work of another part of the app that every forget of a
// data subject does in its transaction (see Executor.OnForget): it removes
// or nulls what that part keeps of the subject's personal data. A step
// that has work for after the commit gives it to eventstore.TxOf(tx)'s
// AfterCommit. An error fails the forget.
type ForgetStep func(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, subject string) error

// OnForget adds step to every forget of a data subject
// (Executor.ForgetSubject, CommandContext.ForgetSubject): it runs in the
// forget's transaction, after the data key is deleted, the entity rows are
// nulled and the tombstone is applied. Call it before the executor serves;
// package integration and the kumiko facade add theirs.
func (d *Executor) OnForget(step ForgetStep) { d.forgetSteps = append(d.forgetSteps, step) }

func (cc *commandContext) ForgetSubject(subject string) error {
	return cc.d.forget(cc.ctx, cc.tx, cc.c, cc.Tenant(), subject)
}

// SubjectExport is every personal value of a data subject that a tenant
// holds (GDPR Art. 15 and 20): the events with its sealed fields and the
// entity rows with its personal fields.
type SubjectExport struct {
	Subject string `json:"subject"`
	// Events holds, in id order, each event with fields of the subject,
	// open (field names as stored).
	Events []eventstore.SubjectEvent `json:"events"`
	// Rows holds the entity rows with fields of the subject, by entity.
	Rows []SubjectRow `json:"rows"`
}

// SubjectRow is an entity row's personal fields of one subject.
type SubjectRow struct {
	Entity string         `json:"entity"`
	ID     uuid.UUID      `json:"id"`
	Fields map[string]any `json:"fields"`
}

// ExportSubject returns every personal value of subject in tenant. A
// forgotten subject's events show its fields as null and its rows have
// none; an unknown subject exports empty lists (no error).
func (d *Executor) ExportSubject(ctx context.Context, tenant uuid.UUID, subject string) (SubjectExport, error) {
	if err := checkSubject(subject); err != nil {
		return SubjectExport{}, err
	}
	out := SubjectExport{Subject: subject, Events: []eventstore.SubjectEvent{}, Rows: []SubjectRow{}}
	var err error
	if out.Events, err = d.store.SubjectEvents(ctx, tenant, subject); err != nil {
		return SubjectExport{}, AsError(err)
	}
	if out.Events == nil {
		out.Events = []eventstore.SubjectEvent{}
	}
	err = d.store.WithTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		for _, e := range d.reg.Entities() {
			if len(e.Personal()) == 0 || e.SystemStream() {
				continue
			}
			rows, err := d.proj.Entity(e.Name()).SubjectRows(ctx, tx, tenant, subject)
			if err != nil {
				return err
			}
			for _, id := range slices.SortedFunc(maps.Keys(rows), func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) }) {
				out.Rows = append(out.Rows, SubjectRow{Entity: e.Name(), ID: id, Fields: rows[id]})
			}
		}
		return nil
	})
	if err != nil {
		return SubjectExport{}, AsError(err)
	}
	return out, nil
}
