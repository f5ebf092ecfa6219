package console_test

import (
	"strconv"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"
)

// An operator signs in, sees the multi-stream projection's consumer die on
// a poison entry, has an operation the dead shard refuses explained,
// restarts it from the page once the cause is fixed and sees it catch up.
// The page fits a 360 px wide screen.
func TestConsumersPage(t *testing.T) {
	e := newEnv(t)
	tb := newTab(t)
	e.write(t, "entry.create", map[string]any{"note": "first"})
	tb.login(t, e, "/ops/consumers", token(t, "olga", "Operator"))
	row := `#consumers tr[data-key="entry_log/__shared__"]`
	tb.run(t, visible(row+`[data-status="idle"][data-lag="0"]`))

	poisoned.Store(true)
	t.Cleanup(func() { poisoned.Store(false) })
	e.write(t, "entry.create", map[string]any{"note": "poison"})
	tb.run(t, visible(row+`[data-status="dead"]`))
	require.Contains(t, tb.text(t, row+` td.err`), "poison entry cannot be logged")
	tb.run(t, visible(row+`[data-lag="1"] svg[aria-label$="now 1 events"] polyline`)) // the sparkline follows the lag

	tb.run(t, confirm(row+` button[data-op="enable"]`), visible(`#notice.error`))
	require.Contains(t, tb.text(t, `#notice`), "enable refused")

	poisoned.Store(false)
	tb.run(t,
		confirm(row+` button[data-op="restart"]`),
		visible(`#notice.ok`),
		visible(row+`[data-status="idle"][data-lag="0"]`),
	)
	require.Equal(t, 2, e.Count(t, "SELECT count(*) FROM entry_log"), "the poison entry is logged after the restart")

	tb.run(t, chromedp.EmulateViewport(360, 740), chromedp.Reload(), visible(row))
	width, err := chromedp.Run(tb.ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
	require.NoError(t, err)
	require.LessOrEqual(t, width, 360, "the page itself does not scroll sideways at 360 px; its tables do")
}

// A handler running past its threshold shows on the page as stuck, naming
// the event and the instance running it; once it returns the shard is idle.
func TestConsumersPageShowsStuck(t *testing.T) {
	e := newEnv(t)
	tb := newTab(t)
	release := make(chan struct{})
	held.Store(&release)
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(func() { unblock(); held.Store(nil) })
	tb.login(t, e, "/ops/consumers", token(t, "olga", "Operator"))
	row := `#consumers tr[data-key="entry_log/__shared__"]`
	tb.run(t, visible(row+`[data-status="idle"]`))

	e.write(t, "entry.create", map[string]any{"note": "hold"})
	id := e.Count(t, "SELECT max(id) FROM kumiko_events WHERE type = 'entry.created'")
	tb.run(t, visible(row+`[data-status="stuck"][data-stuck-event="`+strconv.Itoa(id)+`"]`))
	require.Regexp(t, `^stuck: event `+strconv.Itoa(id)+` on t for [\d.]+ s$`, tb.text(t, row+` td.status`))

	unblock()
	tb.run(t, visible(row+`[data-status="idle"][data-lag="0"]`))
	require.Equal(t, "idle", tb.text(t, row+` td.status`))
}

// An operator starts a rebuild from the page and watches it reach 100 %.
func TestProjectionRebuild(t *testing.T) {
	e := newEnv(t)
	tb := newTab(t)
	for _, n := range []string{"a", "b", "c"} {
		e.write(t, "entry.create", map[string]any{"note": n})
	}
	tb.login(t, e, "/ops/projections", token(t, "olga", "Operator"))
	row := `#projections tr[data-key="entry_counts"]`
	tb.run(t,
		visible(row+`[data-status="ready"]`),
		confirm(row+` button[data-op="rebuild"]`),
		visible(row+`[data-rebuild="100"]`),
	)
	require.Equal(t, "100 % done", tb.text(t, row+` .percent`))
	require.Equal(t, 1, e.Count(t, "SELECT count(*) FROM entry_counts WHERE n = 3"))
}

// An operator follows the event tail, opens an entry's timeline, moves the
// as-of slider back and forth with the keyboard, and signs out.
func TestTimeline(t *testing.T) {
	e := newEnv(t)
	tb := newTab(t)
	id := e.write(t, "entry.create", map[string]any{"note": "draft"})["id"].(string)
	e.write(t, "entry.update", map[string]any{"id": id, "version": 1, "changes": map[string]any{"note": "final"}})
	tb.login(t, e, "/ops/events", token(t, "olga", "Operator"))
	link := `#events a[href$="/aggregates/entry/` + id + `"]`
	tb.run(t, visible(`#events tr[data-type="entry.created"]`), visible(`#events tr[data-type="entry.updated"]`))

	// The type filter follows only the updates; the address keeps it.
	tb.run(t,
		chromedp.SetValue(chromedp.CSS(`#f-type`), "entry.updated"),
		chromedp.Click(chromedp.CSS(`#filter button`)),
		chromedp.WaitNotPresent(chromedp.CSS(`#events tr[data-type="entry.created"]`)),
		visible(`#events tr[data-type="entry.updated"]`),
	)
	types, err := chromedp.Run(tb.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#events tbody tr")].map(r => r.dataset.type)`))
	require.NoError(t, err)
	require.Equal(t, []string{"entry.updated"}, types)
	tb.run(t, chromedp.Reload(), visible(`#events tr[data-type="entry.updated"]`))
	types, err = chromedp.Run(tb.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#events tbody tr")].map(r => r.dataset.type)`))
	require.NoError(t, err)
	require.Equal(t, []string{"entry.updated"}, types, "the filter survives a reload")

	tb.run(t, visible(link), chromedp.Click(chromedp.CSS(link)), visible(`#asof[max="2"]`))
	require.Contains(t, tb.text(t, `#state`), `"final"`)
	require.Contains(t, tb.text(t, `#state`), `"version": 2`, "the entity's state as its detail shows it")
	require.NotContains(t, tb.text(t, `#state`), `"changes"`, "not the update's payload")
	require.Contains(t, tb.text(t, `#diff tr[data-field="note"]`), `"draft"`, "version 2 changed the note from draft")

	tb.run(t, chromedp.Focus(chromedp.CSS(`#asof`)), chromedp.KeyEvent(kb.Home))
	require.Contains(t, tb.text(t, `#asof-value`), "1 of 2")
	require.Contains(t, tb.text(t, `#state`), `"draft"`)
	require.NotContains(t, tb.text(t, `#state`), `"final"`)

	tb.run(t, chromedp.KeyEvent(kb.ArrowRight))
	require.Contains(t, tb.text(t, `#asof-value`), "2 of 2")
	require.Contains(t, tb.text(t, `#state`), `"final"`)

	// Signing out ends the session: the pages send to the form again.
	tb.run(t,
		chromedp.Click(chromedp.CSS(`form.logout button`)), visible(`#token`),
		chromedp.Navigate(e.url+"/ops/consumers"), visible(`#token`),
	)
}

// An operator sees a message its handler failed on among the dead ones,
// has a retry that fails again explained, retries it once the handler is
// fixed, and drops another one; the relay's queue is empty.
func TestIntegrationPage(t *testing.T) {
	e := newEnv(t)
	tb := newTab(t)
	undeliverable.Store(true)
	t.Cleanup(func() { undeliverable.Store(false) })
	e.write(t, "entry.create", map[string]any{"note": "undeliverable"})
	tb.login(t, e, "/ops/integration", token(t, "olga", "Operator"))
	dead := `#dead tr[data-key$="/archive"]`
	tb.run(t, visible(dead), visible(`#queues tr[data-key="integration relay"][data-depth="0"]`))
	require.Contains(t, tb.text(t, dead+` td.err`), "archive refuses the entry")

	tb.run(t, confirm(dead+` button[data-op="retry"]`), visible(`#notice.error`))
	require.Contains(t, tb.text(t, `#notice`), "retry refused")

	undeliverable.Store(false)
	tb.run(t, confirm(dead+` button[data-op="retry"]`), visible(`#notice.ok`), chromedp.WaitNotPresent(chromedp.CSS(dead)))

	undeliverable.Store(true)
	e.write(t, "entry.create", map[string]any{"note": "undeliverable"})
	tb.run(t, visible(dead), confirm(dead+` button[data-op="drop"]`), visible(`#notice.ok`), chromedp.WaitNotPresent(chromedp.CSS(dead)))
}

// Every page fits a 360 px wide screen (its tables scroll in their own
// region), and an action runs from the keyboard alone: Tab to the button,
// Enter, the confirmation opens on Cancel, Tab to Confirm, Enter.
func TestNarrowScreenAndKeyboard(t *testing.T) {
	e := newEnv(t)
	tb := newTab(t)
	id := e.write(t, "entry.create", map[string]any{"note": "narrow"})["id"].(string)
	tb.run(t, chromedp.EmulateViewport(360, 740))
	tb.login(t, e, "/ops/consumers", token(t, "olga", "Operator"))
	tb.run(t, visible(`#consumers`))
	for _, page := range []struct{ path, ready string }{
		{"/ops/consumers", `#consumers tr[data-key="entry_log/__shared__"]`},
		{"/ops/projections", `#projections tr[data-key="entry_counts"]`},
		{"/ops/events", `#events tr[data-id]`},
		{"/ops/aggregates/entry/" + id, `#timeline tbody tr`},
		{"/ops/integration", `#queues tr[data-key="integration relay"]`},
		{"/ops/login", `#token`},
	} {
		tb.run(t, chromedp.Navigate(e.url+page.path), visible(page.ready))
		width, err := chromedp.Run(tb.ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
		require.NoError(t, err)
		require.LessOrEqual(t, width, 360, "%s scrolls sideways at 360 px", page.path)
	}

	row := `#projections tr[data-key="entry_counts"]`
	tb.run(t,
		chromedp.Navigate(e.url+"/ops/projections"), visible(row),
		chromedp.Focus(chromedp.CSS(row+` button[data-op="rebuild"]`)),
		chromedp.KeyEvent(kb.Enter),
		visible(`#confirm[open]`),
	)
	focused, err := chromedp.Run(tb.ctx, chromedp.Evaluate[string](`document.activeElement.id`))
	require.NoError(t, err)
	require.Equal(t, "confirm-cancel", focused, "the confirmation opens on Cancel")
	tb.run(t, chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(kb.Enter), visible(row+`[data-rebuild="100"]`))
}

// A partitioned consumer shows its partitions and their owner; a stream
// whose event failed is parked on the page, with its error; the operator
// retries one stream and skips another's failing event, and the consumer's
// next pass carries them out.
func TestParkedStreamsPage(t *testing.T) {
	e := newEnv(t)
	tb := newTab(t)
	parkable.Store(true)
	t.Cleanup(func() { parkable.Store(false) })
	mailedParcels.Store(0)
	retried := e.write(t, "entry.create", map[string]any{"note": "parcel"})["id"].(string)
	skipped := e.write(t, "entry.create", map[string]any{"note": "parcel"})["id"].(string)
	tb.login(t, e, "/ops/consumers", token(t, "olga", "Operator"))
	for _, k := range []string{"0", "1"} {
		row := `#consumers tr[data-key="entry_mail/__partition_` + k + `__"][data-partition="` + k + `/2"]`
		tb.run(t, visible(row))
		require.Equal(t, "t", tb.text(t, row+` td:nth-child(4)`), "the owner: the only live process")
	}
	rowA, rowB := `#parked tr[data-key="entry_mail/`+retried+`"]`, `#parked tr[data-key="entry_mail/`+skipped+`"]`
	tb.run(t, visible(rowA), visible(rowB))
	require.Contains(t, tb.text(t, rowA+` td.err`), "the parcel cannot be mailed")
	parked, err := chromedp.Run(tb.ctx, chromedp.Evaluate[int](
		`[...document.querySelectorAll('#consumers tr[data-key^="entry_mail/"]')].reduce((n, r) => n + Number(r.dataset.parked), 0)`))
	require.NoError(t, err)
	require.Equal(t, 2, parked, "the shards count their parked streams")

	parkable.Store(false)
	tb.run(t, confirm(rowA+` button[data-op="retry"]`), visible(`#notice.ok`), chromedp.WaitNotPresent(chromedp.CSS(rowA)))
	require.Contains(t, tb.text(t, `#notice`), "retry requested")
	tb.run(t, confirm(rowB+` button[data-op="skip"]`), visible(`#notice.ok`), chromedp.WaitNotPresent(chromedp.CSS(rowB)))
	tb.run(t, visible(`#parked tr.empty`))
	require.Equal(t, int32(1), mailedParcels.Load(), "the retried parcel is mailed, the skipped one never")
}
