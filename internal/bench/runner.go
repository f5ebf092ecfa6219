package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// opFunc performs one operation as worker w (0 ≤ w < workers, stable across
// runs, so a worker may own state such as a stream) and returns how many units
// (events, loads) it completed.
type opFunc func(ctx context.Context, w int) (int, error)

// measured is a number of units completed in some wall-clock time.
type measured struct {
	units   int64
	elapsed time.Duration
}

func (m measured) rate() float64 {
	if m.elapsed <= 0 {
		return 0
	}
	return float64(m.units) / m.elapsed.Seconds()
}

// runFor runs op in a loop on `workers` goroutines until d has passed and
// returns the units they completed. The first error stops every worker and is
// returned.
func runFor(ctx context.Context, workers int, d time.Duration, op opFunc) (measured, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		units atomic.Int64
		wg    sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(deadline) {
				n, err := op(ctx, w)
				if err != nil {
					cancel(err)
					return
				}
				units.Add(int64(n))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return measured{}, err
	}
	return measured{units: units.Load(), elapsed: elapsed}, nil
}

// pair is one comparison: the framework and the raw baseline doing the same
// work at the same concurrency.
type pair struct {
	name    string
	unit    string
	workers int
	fw, raw opFunc
	goal    goal
}

// compare warms both sides up, then runs them in alternating rounds (the side
// that goes first alternates too) so both see the same machine state.
func (b *bench) compare(ctx context.Context, p pair) (row, error) {
	fmt.Fprintf(os.Stderr, "  %s …\n", p.name)
	sides := [2]opFunc{p.fw, p.raw}
	for _, op := range sides {
		if _, err := runFor(ctx, p.workers, b.cfg.warmup, op); err != nil {
			return row{}, fmt.Errorf("%s: warm-up: %w", p.name, err)
		}
	}
	var total [2]measured
	var cpu [2]cpuUse
	slice := b.cfg.duration / time.Duration(b.cfg.rounds)
	for round := range b.cfg.rounds {
		for i := range 2 {
			side := (i + round) % 2
			var before cpuUse
			if b.cfg.cpu {
				before = cpuNow()
			}
			m, err := runFor(ctx, p.workers, slice, sides[side])
			if err != nil {
				return row{}, fmt.Errorf("%s: %w", p.name, err)
			}
			if b.cfg.cpu {
				cpu[side] = cpu[side].add(cpuNow().sub(before))
			}
			total[side].units += m.units
			total[side].elapsed += m.elapsed
		}
	}
	r := row{name: p.name, unit: p.unit, fw: total[0].rate(), raw: total[1].rate(), goal: p.goal}
	if b.cfg.cpu {
		r.cpu = &[2]cpuUse{cpu[0].perUnit(total[0].units), cpu[1].perUnit(total[1].units)}
	}
	return r, nil
}

// goal is a target printed beside a row; it is reported, never asserted.
type goal struct {
	text string
	met  func(fw, raw float64) bool // nil: no target
}

// atLeastOfRaw is the goal "framework ≥ frac of raw".
func atLeastOfRaw(frac float64) goal {
	return goal{
		text: fmt.Sprintf("≥ %.0f%% raw", frac*100),
		met:  func(fw, raw float64) bool { return fw >= frac*raw },
	}
}

// row is one line of the result table.
type row struct {
	name, unit string
	fw, raw    float64
	goal       goal
	cpu        *[2]cpuUse // per unit, framework and raw; nil unless -cpu
}

func printTable(rows []row) {
	width := len("measurement")
	var all []row
	for _, r := range rows {
		all = append(all, r)
		if r.cpu != nil {
			all = append(all, cpuRows(r)...)
		}
	}
	rows = all
	for _, r := range rows {
		width = max(width, utf8.RuneCountInString(r.name))
	}
	format := "%-" + strconv.Itoa(width) + "s  %-8s %11s %11s %7s %10s  %s\n"
	fmt.Printf(format, "measurement", "unit", "framework", "raw", "fw/raw", "target", "result")
	for _, r := range rows {
		ratio, result := "-", "-"
		if r.raw > 0 {
			ratio = fmt.Sprintf("%.3f", r.fw/r.raw)
		}
		target := r.goal.text
		if r.goal.met == nil {
			target = "-"
		} else if r.goal.met(r.fw, r.raw) {
			result = "OK"
		} else {
			result = "BELOW"
		}
		fmt.Printf(format, r.name, r.unit, formatValue(r.fw, r.unit), formatValue(r.raw, r.unit), ratio, target, result)
	}
}

// formatValue prints a rate with thousands separators, a factor ("x") with
// two decimals.
func formatValue(v float64, unit string) string {
	if unit == "x" {
		return fmt.Sprintf("%.2fx", v)
	}
	s := strconv.FormatInt(int64(v+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
