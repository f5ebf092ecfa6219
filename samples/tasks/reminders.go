package tasks

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/feature"
)

// TaskDue is what the reminder planner reads of a task.created or
// task.updated payload: the due time, when the write set one.
type TaskDue struct {
	DueAt *time.Time `json:"dueAt"`
}

// RemindArgs are the args of "task.remind": the task and the due time the
// reminder was planned for.
type RemindArgs struct {
	TaskID uuid.UUID `json:"taskId"`
	DueAt  time.Time `json:"dueAt"`
}

// ReminderDue is the payload of "reminder.due", appended when a task is
// still open at its due time; a mailer or a push service reacts to it.
type ReminderDue struct {
	TaskID uuid.UUID `json:"taskId" validate:"required"`
	Title  string    `json:"title"`
	DueAt  time.Time `json:"dueAt"`
}

// DigestArgs are the args of "task.daily-digest": none.
type DigestArgs struct{}

// DigestCompiled is the payload of "digest.compiled": how many tasks were
// open, in all tenants, when the digest ran.
type DigestCompiled struct {
	Day  string `json:"day" validate:"required"`
	Open int64  `json:"open"`
}

// Reminders adds background jobs to the task list: a reminder at a task's
// due time, and a daily digest. Serve it next to Feature.
var Reminders = feature.Define("reminders", func(r *feature.Registrar) {
	r.DefineEvent("reminder.due", ReminderDue{})
	r.DefineEvent("digest.compiled", DigestCompiled{})

	// Every write that sets a due time plans a reminder for it, in the
	// writer's tenant and as the writer.
	r.Job("task.plan-reminder", TaskDue{}, planReminder, feature.OnEvent("task.created", "task.updated"))
	// A reminder for one (task, due time) exists once, however often the
	// task is saved with it: uniqueness is by the args (and the tenant),
	// not by the save that planned it.
	r.Job("task.remind", RemindArgs{}, remind, feature.UniqueFor(24*time.Hour), feature.JobAttempts(5))
	// The digest runs at 07:00 UTC and by hand (`tasks job run
	// task.daily-digest`); Exclusive keeps a run by hand from working while
	// the scheduled run still does.
	r.Job("task.daily-digest", DigestArgs{}, digest, feature.Cron("0 7 * * *"), feature.Exclusive())
})

func planReminder(ctx feature.JobContext, in TaskDue) error {
	ev, ok := ctx.Event()
	if !ok || in.DueAt == nil {
		return nil
	}
	return ctx.Enqueue("task.remind", RemindArgs{TaskID: ev.AggregateID, DueAt: *in.DueAt}, *in.DueAt)
}

// remindedTask is what remind reads of a task's state.
type remindedTask struct {
	Title     string     `json:"title"`
	Done      *bool      `json:"done"`
	DueAt     *time.Time `json:"dueAt"`
	DeletedAt *time.Time `json:"deletedAt"`
}

// remind appends reminder.due if the task is still open and still due at
// the time the reminder was planned for.
func remind(ctx feature.JobContext, in RemindArgs) error {
	task, err := ctx.LoadAggregate(in.TaskID, "task", feature.LoadOptions{})
	if err != nil {
		return err
	}
	if task.Version() == 0 {
		return nil
	}
	state, err := feature.StateAs[remindedTask](task)
	if err != nil {
		return err
	}
	if (state.Done != nil && *state.Done) || state.DeletedAt != nil {
		return nil
	}
	if state.DueAt == nil || !state.DueAt.Equal(in.DueAt) {
		return nil // moved: the reminder for the new time is planned already
	}
	_, err = ctx.AppendEvent(feature.AppendSpec{AggregateType: "reminder", Type: "reminder.due",
		Payload: ReminderDue{TaskID: in.TaskID, Title: state.Title, DueAt: in.DueAt}})
	return err
}

// digest counts the open tasks of all tenants (the job runs in the system
// tenant) and records the count.
func digest(ctx feature.JobContext, _ DigestArgs) error {
	var open int64
	if err := ctx.DB().QueryRow(ctx.Context(), `SELECT count(*) FROM read_task WHERE NOT done AND deleted_at IS NULL`).Scan(&open); err != nil {
		return fmt.Errorf("count open tasks: %w", err)
	}
	_, err := ctx.AppendEvent(feature.AppendSpec{AggregateType: "digest", Type: "digest.compiled",
		Payload: DigestCompiled{Day: time.Now().UTC().Format(time.DateOnly), Open: open}})
	return err
}
