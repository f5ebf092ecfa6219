package registry

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/jobspec"
	"github.com/kumiko-go/kumiko/internal/spec"
)

// RuleJob is the rule of a job whose declaration does not fit.
const RuleJob = "job"

var jobContextType = reflect.TypeFor[feature.JobContext]()

// jobOption names a job setting by the feature option that sets it.
var jobOption = map[jobspec.Setting]string{
	jobspec.MaxAttempts: "JobAttempts",
	jobspec.UniqueFor:   "UniqueFor",
	jobspec.Timeout:     "JobTimeout",
	jobspec.Schedule:    "Cron",
}

// Job is a compiled background job.
type Job struct {
	feature string
	def     spec.Job
	fn      reflect.Value
}

// Name is the job's name.
func (j *Job) Name() string { return j.def.Name }

// Feature is the declaring feature.
func (j *Job) Feature() string { return j.feature }

// On are the event types that enqueue the job.
func (j *Job) On() []string { return slices.Clone(j.def.On) }

// Schedule is the job's cron expression, checked by Build; "" = none.
func (j *Job) Schedule() string { return j.def.Schedule }

// MaxAttempts is the job's attempts before it is discarded; 0 = the
// runner's default, jobs.Config.MaxAttempts (10 unless set; a kumiko app
// does not set it).
func (j *Job) MaxAttempts() int { return j.def.MaxAttempts }

// UniqueFor is the job's uniqueness window; 0 = not unique.
func (j *Job) UniqueFor() time.Duration { return j.def.UniqueFor }

// Timeout bounds one attempt of the job; 0 = the runner's default,
// jobs.DefaultTimeout (one minute).
func (j *Job) Timeout() time.Duration { return j.def.Timeout }

// Exclusive reports whether at most one run of the job works at a time.
func (j *Job) Exclusive() bool { return j.def.Exclusive }

// Run decodes args into the job's args type and calls its handler.
func (j *Job) Run(ctx feature.JobContext, args json.RawMessage) error {
	v := reflect.New(j.def.Args)
	if err := json.Unmarshal(args, v.Interface()); err != nil {
		return fmt.Errorf("job %s: args: %w", j.def.Name, err)
	}
	out := j.fn.Call([]reflect.Value{reflect.ValueOf(&ctx).Elem(), v.Elem()})
	if e := out[0].Interface(); e != nil {
		return e.(error)
	}
	return nil
}

// Job returns the job called name.
func (r *Registry) Job(name string) (*Job, bool) {
	j, ok := r.jobs[name]
	return j, ok
}

// Jobs lists the jobs in declaration order.
func (r *Registry) Jobs() []*Job { return slices.Clone(r.jobOrder) }

// job compiles a job declaration. Its name and settings are checked
// against the contract the runner checks too (internal/jobspec).
func (b *builder) job(feat string, def spec.Job) {
	item := fmt.Sprintf("job %q", def.Name)
	if !jobspec.ValidName(def.Name) {
		b.fail(feat, item, RuleName, "job names are %s, like task.remind", jobspec.NameRule)
		return
	}
	if _, dup := b.reg.jobs[def.Name]; dup {
		b.fail(feat, item, RuleUnique, "job %q is declared twice", def.Name)
		return
	}
	ok := true
	bad := func(format string, args ...any) {
		b.fail(feat, item, RuleJob, format, args...)
		ok = false
	}
	if def.Args == nil {
		bad("args is nil; pass a value of the args struct type, like RemindArgs{}")
	}
	fv := reflect.ValueOf(def.Handler)
	if def.Handler == nil || fv.Kind() != reflect.Func || fv.IsNil() {
		bad("handler must be func(feature.JobContext, %v) error, got %T", def.Args, def.Handler)
	} else if ft := fv.Type(); ft.IsVariadic() || ft.NumIn() != 2 || ft.In(0) != jobContextType || ft.In(1) != def.Args ||
		ft.NumOut() != 1 || ft.Out(0) != errorType {
		bad("handler must be func(feature.JobContext, %v) error, got %s", def.Args, ft)
	}
	for _, ev := range def.On {
		if b.reg.events[ev] == nil {
			bad("OnEvent names %q, which no feature defines", ev)
		}
	}
	settings := jobspec.Settings{MaxAttempts: def.MaxAttempts, UniqueFor: def.UniqueFor, Timeout: def.Timeout, Schedule: def.Schedule}
	for _, p := range settings.Check() {
		bad("%s %s", jobOption[p.Setting], p.Message)
	}
	if !ok {
		return
	}
	j := &Job{feature: feat, def: def, fn: fv}
	b.reg.jobs[def.Name] = j
	b.reg.jobOrder = append(b.reg.jobOrder, j)
}
