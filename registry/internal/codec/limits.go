package codec

import (
	"errors"
	"time"

	"github.com/kumiko-go/kumiko/kumikotype"
)

// MaxSortKeys caps the sort keys of a list: every key widens the keyset
// condition of each later page, by one comparison per earlier key.
const MaxSortKeys = 8

// Timestamps are stored in timestamptz columns and travel as RFC 3339. The
// column holds no year 0 (it goes from 1 AD back to 4713 BC) and RFC 3339
// writes no year past 9999, so the range both can carry is years 1 to 9999
// in UTC.
var (
	minTime = time.Date(1, time.January, 1, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(9999, time.December, 31, 23, 59, 59, 999999000, time.UTC)
)

// maxOffset bounds a time's UTC offset (exclusive): RFC 3339 offsets have
// hours 00–23, and time.Time's JSON encoding refuses any other.
const maxOffset = 24 * 60 * 60

const timeRangeMessage = "must lie between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z"

// ParseTime reads a timestamp the way payload fields, list filters, asOf
// values and list cursors are read: RFC 3339, returned in UTC and truncated
// to microseconds (the column's precision). A value outside years 1 to 9999
// once in UTC is refused, whatever its offset: the database could not store
// it, or its RFC 3339 form could not be read back. So is an offset of 24
// hours or more ("+24:00", which time.Parse accepts but RFC 3339 does not):
// a time.Time carrying it cannot be encoded as JSON.
func ParseTime(s string) (time.Time, error) {
	t, code, msg := parseTime(s)
	if code != "" {
		return time.Time{}, errors.New(msg)
	}
	return t, nil
}

// parseTime is ParseTime for any value toTime accepts, with a problem code:
// "type" for what is not a timestamp, "range" for one outside the range.
func parseTime(v any) (t time.Time, code kumikotype.FieldCode, msg string) {
	t, ok := toTime(v)
	if !ok {
		return time.Time{}, kumikotype.FieldCodeType, "must be an RFC 3339 timestamp"
	}
	if _, off := t.Zone(); off <= -maxOffset || off >= maxOffset {
		return time.Time{}, kumikotype.FieldCodeType, "must be an RFC 3339 timestamp (UTC offset at most 23:59)"
	}
	t = t.UTC().Truncate(time.Microsecond)
	if t.Before(minTime) || t.After(maxTime) {
		return time.Time{}, kumikotype.FieldCodeRange, timeRangeMessage
	}
	return t, "", ""
}

// parseAsOf reads an asOf value. The first instant of year 1 is read one
// microsecond later, since the zero time.Time means "now" to the pipeline;
// nothing can have happened in between.
func parseAsOf(v any) (t time.Time, code kumikotype.FieldCode, msg string) {
	if t, code, msg = parseTime(v); code == "" && t.IsZero() {
		t = t.Add(time.Microsecond)
	}
	return t, code, msg
}
