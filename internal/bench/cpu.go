package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuUse is the CPU time a side spent: this process's, and that of the
// PostgreSQL server processes on this machine.
type cpuUse struct {
	self, postgres time.Duration
}

func (c cpuUse) add(d cpuUse) cpuUse {
	return cpuUse{self: c.self + d.self, postgres: c.postgres + d.postgres}
}

func (c cpuUse) sub(d cpuUse) cpuUse {
	return cpuUse{self: c.self - d.self, postgres: c.postgres - d.postgres}
}

// cpuNow reads both clocks: getrusage for this process, /proc/<pid>/stat
// (utime + stime, in the kernel's 100 Hz ticks) for every process named
// postgres. Off Linux, or with the database on another machine, the
// postgres clock stays 0.
func cpuNow() cpuUse {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	c := cpuUse{self: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		stat, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(stat)
		end := strings.LastIndexByte(s, ')')
		if end < 0 || !strings.HasSuffix(s[:end], "(postgres") {
			continue
		}
		// After "pid (comm) ": state, then utime and stime as fields 12 and 13.
		f := strings.Fields(s[end+1:])
		if len(f) < 13 {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		c.postgres += time.Duration(utime+stime) * 10 * time.Millisecond
	}
	return c
}

// perUnit is c spread over units, in µs per unit.
func (c cpuUse) perUnit(units int64) cpuUse {
	if units <= 0 {
		return cpuUse{}
	}
	return cpuUse{self: c.self / time.Duration(units), postgres: c.postgres / time.Duration(units)}
}

// cpuRows are r's CPU rows: the time per unit of each side, this process's
// and PostgreSQL's (the latter only when it was seen).
func cpuRows(r row) []row {
	fw, raw := r.cpu[0], r.cpu[1]
	rows := []row{{name: "  CPU per unit, this process", unit: "µs", fw: micros(fw.self), raw: micros(raw.self)}}
	if fw.postgres > 0 || raw.postgres > 0 {
		rows = append(rows, row{name: "  CPU per unit, PostgreSQL", unit: "µs", fw: micros(fw.postgres), raw: micros(raw.postgres)})
	}
	return rows
}
