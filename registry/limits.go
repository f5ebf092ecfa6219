package registry

import (
	"time"

	"github.com/kumiko-go/kumiko/registry/internal/codec"
)

// MaxSortKeys caps the sort keys of a list: every key widens the keyset
// condition of each later page, by one comparison per earlier key.
const MaxSortKeys = codec.MaxSortKeys

// ParseTime reads a timestamp the way payload fields, list filters, asOf
// values and list cursors are read: RFC 3339, returned in UTC and truncated
// to microseconds (the column's precision). A value outside years 1 to 9999
// once in UTC is refused, whatever its offset: the database could not store
// it, or its RFC 3339 form could not be read back. So is an offset of 24
// hours or more ("+24:00", which time.Parse accepts but RFC 3339 does not):
// a time.Time carrying it cannot be encoded as JSON.
func ParseTime(s string) (time.Time, error) { return codec.ParseTime(s) }
