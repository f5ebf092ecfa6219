// Package jobspec is the contract of a background job's settings, checked
// here for both sides that take them: registry.Build, for a job declared
// with feature.Registrar.Job (a boot error), and jobs.New, for a jobs.Job
// (the runner's error). Each side words the problems in its own
// vocabulary: the DSL's options (JobAttempts, Cron…) or jobs.Job's fields.
//
// The contract:
//   - Name: lowercase letters, digits, '.', '_' or '-', starting with a
//     letter and ending with a letter or digit (ValidName), like
//     task.remind.
//   - MaxAttempts: not negative; 0 = the runner's default,
//     jobs.Config.MaxAttempts (10 unless set; a kumiko app does not set
//     it).
//   - UniqueFor: not negative; 0 = not unique. (jobs.New alone still
//     accepts a negative one, which jobs.Job.UniqueFor documents as not
//     unique: it is unique only when positive.)
//   - Timeout: not negative; 0 = the runner's default, jobs.DefaultTimeout
//     (one minute).
//   - Schedule: "" (none) or a cron expression of five fields or a
//     descriptor (@daily, @every 1h…), parsed by robfig/cron's
//     ParseStandard, the parser the runner schedules with.
//
// The package imports nothing of the framework.
package jobspec

import (
	"fmt"
	"regexp"
	"time"

	"github.com/robfig/cron/v3"
)

// NameRule describes the job names ValidName accepts, for messages.
const NameRule = "lowercase letters, digits, '.', '_' or '-', starting with a letter and ending with a letter or digit"

var namePattern = regexp.MustCompile(`^[a-z][a-z0-9_.-]*[a-z0-9]$`)

// ValidName reports whether name is a valid job name (NameRule).
func ValidName(name string) bool { return namePattern.MatchString(name) }

// Setting names one setting of a job.
type Setting int

// The settings, in the order Check reports them.
const (
	MaxAttempts Setting = iota + 1
	UniqueFor
	Timeout
	Schedule
)

// String is the setting's jobs.Job field name.
func (s Setting) String() string {
	switch s {
	case MaxAttempts:
		return "MaxAttempts"
	case UniqueFor:
		return "UniqueFor"
	case Timeout:
		return "Timeout"
	case Schedule:
		return "Schedule"
	}
	return fmt.Sprintf("Setting(%d)", int(s))
}

// Settings are a job's settings; the zero value keeps the contract and
// means the defaults.
type Settings struct {
	MaxAttempts int
	UniqueFor   time.Duration
	Timeout     time.Duration
	Schedule    string
}

// Problem is a setting that breaks the contract.
type Problem struct {
	Setting Setting
	// Message says what is wrong, without naming the setting: `is
	// negative (-1)`, `"every day": expected exactly 5 fields, …`.
	Message string
}

// String words the problem in jobs.Job's vocabulary.
func (p Problem) String() string { return p.Setting.String() + " " + p.Message }

// Check returns the settings' problems in the order of the Setting
// constants; none when the settings keep the contract.
func (s Settings) Check() []Problem {
	var ps []Problem
	negative := func(set Setting, v any) {
		ps = append(ps, Problem{Setting: set, Message: fmt.Sprintf("is negative (%v)", v)})
	}
	if s.MaxAttempts < 0 {
		negative(MaxAttempts, s.MaxAttempts)
	}
	if s.UniqueFor < 0 {
		negative(UniqueFor, s.UniqueFor)
	}
	if s.Timeout < 0 {
		negative(Timeout, s.Timeout)
	}
	if s.Schedule != "" {
		if _, err := ParseSchedule(s.Schedule); err != nil {
			ps = append(ps, Problem{Setting: Schedule, Message: fmt.Sprintf("%q: %v", s.Schedule, err)})
		}
	}
	return ps
}

// ParseSchedule parses a job's cron expression.
func ParseSchedule(expr string) (cron.Schedule, error) { return cron.ParseStandard(expr) }
