package integration

import (
	"crypto/sha256"
	"fmt"
	"math"
	"mime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// The AMQP wire format of a message (docs/integration-events.md#wire-format):
// the properties message_id, type, timestamp, correlation_id and
// content_type, and these headers.
const (
	headerTenant    = "kumiko-tenant"
	headerUser      = "kumiko-user"
	headerCausation = "kumiko-causation"
	headerVersion   = "kumiko-event-version"
	// headerKey is the ordering key (feature.Message.Key).
	headerKey = pipeline.MessageKeyHeader
	// headerAttempts counts the failed deliveries of a message so far; the
	// app sets it when it sends a message back to wait, or keeps it dead.
	headerAttempts = "kumiko-attempts"
	// headerError and headerDeadAt are the last failure of a message and,
	// on one the app keeps dead, when it gave up.
	headerError  = "kumiko-error"
	headerDeadAt = "kumiko-dead-at"
	// headerQueue is the queue a message the app keeps dead came from,
	// which a retry sends it back to.
	headerQueue = "kumiko-queue"
)

// ours are the headers the wire format defines; a message's other string
// headers (trace context among them) are its Headers.
var ours = []string{headerTenant, headerUser, headerCausation, headerVersion, headerKey, headerAttempts, headerError, headerDeadAt, headerQueue}

// MessageIDSpace is the namespace of the UUIDs (version 5, SHA-1) that
// MessageID makes of message ids that are not UUIDs.
var MessageIDSpace = uuid.MustParse("0b7f3c1e-8a52-5d0e-9b4c-6f2d1a9e7c30")

// MessageID is the id a message with the AMQP message_id raw has in the
// app (Message.ID, the inbox, `integration dead`): raw itself when it is
// a UUID, else the version-5 UUID of raw in MessageIDSpace, so that every
// delivery of one message has the same id.
func MessageID(raw string) uuid.UUID {
	if id, err := uuid.Parse(raw); err == nil {
		return id
	}
	return uuid.NewSHA1(MessageIDSpace, []byte(raw))
}

// contentID is the id of a message sent without a message_id: the same
// for every delivery of the same content.
func contentID(d amqp.Delivery) uuid.UUID {
	h := sha256.New()
	tenant, _ := text(d.Headers[headerTenant])
	for _, s := range []string{d.Exchange, d.RoutingKey, d.Type, tenant} {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	h.Write(d.Body)
	return uuid.NewSHA1(MessageIDSpace, h.Sum(nil))
}

// publishing is the AMQP message of m.
func publishing(m feature.Message) amqp.Publishing {
	h := amqp.Table{
		headerTenant:  m.TenantID.String(),
		headerVersion: int32(m.Version),
	}
	if m.UserID != "" {
		h[headerUser] = m.UserID
	}
	if m.CausationID != "" {
		h[headerCausation] = m.CausationID
	}
	if m.Key != "" {
		h[headerKey] = m.Key
	}
	for k, v := range m.Headers {
		if _, taken := h[k]; !taken {
			h[k] = v
		}
	}
	return amqp.Publishing{
		Headers: h, ContentType: "application/json", DeliveryMode: amqp.Persistent,
		CorrelationId: m.CorrelationID, MessageId: m.ID.String(), Timestamp: m.PublishedAt,
		Type: m.Type, Body: m.Payload,
	}
}

// message is the feature.Message of a delivery, as far as it can be read:
// ID and Type are always set, so that a message that breaks the wire
// format can still be listed and named. The error, a
// *registry.ValidationError with the paths of the properties and headers
// at fault, says what breaks it.
func message(d amqp.Delivery) (feature.Message, error) {
	m := feature.Message{Type: contractOf(d), Payload: d.Body, CorrelationID: d.CorrelationId, PublishedAt: d.Timestamp}
	if d.MessageId != "" {
		m.ID = MessageID(d.MessageId)
	} else {
		m.ID = contentID(d)
	}
	if m.PublishedAt.IsZero() {
		m.PublishedAt = time.Now().UTC()
	}
	var bad []registry.FieldError
	fail := func(path string, code kumikotype.FieldCode, msg string) {
		bad = append(bad, registry.FieldError{Path: path, Code: string(code), Message: msg})
	}
	if m.Type == "" {
		fail("properties.type", kumikotype.FieldCodeRequired, "type (or the routing key) must name the contract")
	}
	if ct := d.ContentType; ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			fail("properties.content_type", kumikotype.FieldCodeOneOf, fmt.Sprintf("content type %q is not application/json", ct))
		}
	}
	switch tenant, ok := text(d.Headers[headerTenant]); {
	case !ok || tenant == "":
		fail("headers."+headerTenant, kumikotype.FieldCodeRequired, "the tenant's UUID is required, as a string")
	default:
		id, err := uuid.Parse(tenant)
		if err != nil {
			fail("headers."+headerTenant, kumikotype.FieldCodeUUID, fmt.Sprintf("tenant %q is not a UUID", tenant))
		}
		m.TenantID = id
	}
	v, err := version(d.Headers[headerVersion])
	if err != nil {
		fail("headers."+headerVersion, kumikotype.FieldCodeType, err.Error())
	}
	m.Version = v
	m.UserID, _ = text(d.Headers[headerUser])
	m.CausationID, _ = text(d.Headers[headerCausation])
	m.Key, _ = text(d.Headers[headerKey])
	for k, v := range d.Headers {
		s, ok := v.(string)
		if !ok || slices.Contains(ours, k) || strings.HasPrefix(k, "x-") { // ours, or the broker's (x-delivery-count, x-death, …)
			continue
		}
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers[k] = s
	}
	if bad != nil {
		return m, &registry.ValidationError{Fields: bad}
	}
	return m, nil
}

// contractOf is the contract of d: its type, else the routing key it was
// published with (the first one, for a message the broker dead-lettered
// since).
func contractOf(d amqp.Delivery) string {
	if d.Type != "" {
		return d.Type
	}
	if deaths, _ := d.Headers["x-death"].([]any); len(deaths) > 0 {
		first, _ := deaths[len(deaths)-1].(amqp.Table)
		if keys, _ := first["routing-keys"].([]any); len(keys) > 0 {
			if k, ok := keys[0].(string); ok {
				return k
			}
		}
	}
	return d.RoutingKey
}

// version reads the contract version header: any AMQP integer type, an
// integral float or decimal, or a decimal string; missing means 1.
func version(v any) (int, error) {
	var n int64
	switch x := v.(type) {
	case nil:
		return 1, nil
	case int8:
		n = int64(x)
	case uint8:
		n = int64(x)
	case int16:
		n = int64(x)
	case uint16:
		n = int64(x)
	case int32:
		n = int64(x)
	case uint32:
		n = int64(x)
	case int64:
		n = x
	case int:
		n = int64(x)
	case uint64:
		n = int64(min(x, math.MaxInt64))
	case float32:
		return version(float64(x))
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > math.MaxInt32 {
			return 0, fmt.Errorf("version %v is not a whole number", x)
		}
		n = int64(x)
	case amqp.Decimal:
		if x.Scale != 0 {
			return 0, fmt.Errorf("version %d×10^-%d is not a whole number", x.Value, x.Scale)
		}
		n = int64(x.Value)
	case string, []byte:
		s, _ := text(x)
		p, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("version %q is not a number", s)
		}
		n = p
	default:
		return 0, fmt.Errorf("version of AMQP type %T is neither an integer nor a string", v)
	}
	if n < 1 || n > registry.MaxVersion {
		return 0, fmt.Errorf("version %d is outside 1 to %d", n, registry.MaxVersion)
	}
	return int(n), nil
}

// text is a header's string value (AMQP long strings arrive as string,
// byte arrays as []byte).
func text(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	}
	return "", false
}

// count reads a counting header (ours or the broker's) of any integer type.
func count(v any) int {
	switch x := v.(type) {
	case int8, uint8, int16, uint16, int32, uint32, int64, int, float64, string:
		n, err := version(x)
		if err == nil {
			return n
		}
	}
	return 0
}
