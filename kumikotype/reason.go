package kumikotype

// Reason is a finer reason code: the reason member of a problem answer,
// next to its Code. A client may branch on it; the wire string of each
// constant is stable. The reason of an error that has none finer is its
// code. feature.Refuse takes reasons of the app's own, which need no
// constant here.
type Reason string

// Reasons of the event store's errors.
const (
	// ReasonEventVersionConflict: the stream is not at the expected
	// version (version_conflict).
	ReasonEventVersionConflict Reason = "event_version_conflict"
	// ReasonStreamArchived: a write to an archived stream
	// (stream_archived).
	ReasonStreamArchived Reason = "stream_archived"
	// ReasonAggregateNotFound: no stream of that id in the tenant
	// (not_found).
	ReasonAggregateNotFound Reason = "aggregate_not_found"
	// ReasonDatabaseUnavailable: the database is out of reach
	// (unavailable).
	ReasonDatabaseUnavailable Reason = "database_unavailable"
	// ReasonEventSchemaUnknownVersion: a stored event is of a newer version
	// than this server knows (internal_error on a read, version_conflict on
	// a write). The event store's errors.Code of such an event is this
	// string too.
	ReasonEventSchemaUnknownVersion Reason = "event_schema_unknown_version"
)

// Reasons of the executor's errors.
const (
	// ReasonHandlerNotFound: no handler of that name and kind, or no
	// entity of that name (not_found).
	ReasonHandlerNotFound Reason = "handler_not_found"
	// ReasonProjectionNotFound: no projection of that name (not_found).
	ReasonProjectionNotFound Reason = "projection_not_found"
	// ReasonUnknownEvent: a handler appended an event no feature defines
	// (internal_error).
	ReasonUnknownEvent Reason = "unknown_event"
	// ReasonForeignEvent: a handler appended an event of another entity's
	// stream (internal_error).
	ReasonForeignEvent Reason = "foreign_event"
	// ReasonUnknownIntegrationEvent: a handler published an integration
	// event the app does not declare (internal_error).
	ReasonUnknownIntegrationEvent Reason = "unknown_integration_event"
	// ReasonFieldAccess: the caller may not read or write a field
	// (access_denied, details.field).
	ReasonFieldAccess Reason = "field_access"
	// ReasonInvalidCursor: a list cursor was altered or belongs to another
	// ordering (validation_error).
	ReasonInvalidCursor Reason = "invalid_cursor"
	// ReasonAsOfBusy: too many lists with asOf are running (unavailable).
	ReasonAsOfBusy Reason = "as_of_busy"
	// ReasonAsOfTimeout: a list with asOf ran past its time (unavailable).
	ReasonAsOfTimeout Reason = "as_of_timeout"
	// ReasonTimeout: the request was cancelled or ran past its time
	// (unavailable).
	ReasonTimeout Reason = "timeout"
	// ReasonReferenceNotFound: a MustExist reference names no live row of
	// the writer's tenant (unprocessable, details.field).
	ReasonReferenceNotFound Reason = "reference_not_found"
	// ReasonHandlerPanic: feature code panicked (internal_error).
	ReasonHandlerPanic Reason = "handler_panic"
)

// Reasons of idempotency_conflict.
const (
	// ReasonKeyReused is the reason of the idempotency_conflict of a key
	// used before for a request with another body: a 422, where the other
	// reasons of that code are a 409.
	ReasonKeyReused Reason = "key_reused"
	// ReasonAlreadyApplied: the keyed request was applied and its response
	// is gone (409).
	ReasonAlreadyApplied Reason = "already_applied"
	// ReasonRequestInProgress: a request with the key is still running
	// (409, Retry-After).
	ReasonRequestInProgress Reason = "request_in_progress"
)

// Reasons of the consumer operations' and the prune guard's errors.
const (
	// ReasonConsumerNotFound: no state row for the consumer shard
	// (not_found).
	ReasonConsumerNotFound Reason = "consumer_not_found"
	// ReasonWrongState: the shard's status does not allow the operation
	// (unprocessable, details.status).
	ReasonWrongState Reason = "wrong_state"
	// ReasonNothingToSkip: no event after the cursor (unprocessable).
	ReasonNothingToSkip Reason = "nothing_to_skip"
	// ReasonGapUnsettled: an earlier event may still commit
	// (unprocessable).
	ReasonGapUnsettled Reason = "gap_unsettled"
	// ReasonConsumerLagging: a consumer has not processed the events a
	// prune would remove (unprocessable).
	ReasonConsumerLagging Reason = "consumer_lagging"
	// ReasonStreamNotParked: the consumer has no such parked stream
	// (not_found).
	ReasonStreamNotParked Reason = "stream_not_parked"
	// ReasonResetUnsafe: a reset that would leave what the consumer wrote
	// inconsistent with its cursor, or repeat side effects unconfirmed
	// (unprocessable; the detail names the safe choices).
	ReasonResetUnsafe Reason = "reset_unsafe"
	// ReasonInvalidOperation: a consumer operation's arguments are wrong
	// (a position beyond the log, a partition count out of range, no
	// actor; validation_error or unprocessable).
	ReasonInvalidOperation Reason = "invalid_operation"
	// ReasonRepartitionBlocked: a repartition cannot drain the consumer's
	// shards (one is dead, disabled or expired, or they did not reach the
	// fence in time); nothing changed (unprocessable).
	ReasonRepartitionBlocked Reason = "repartition_blocked"
)

// Reasons of personal data (docs/personal-data.md).
const (
	// ReasonSubjectMissing: a write sets a personal field whose data
	// subject field is empty, so the value could never be forgotten
	// (validation_error; details.field names the subject field).
	ReasonSubjectMissing Reason = "subject_missing"
	// ReasonInvalidSubject: a subject id that is empty or too long
	// (validation_error).
	ReasonInvalidSubject Reason = "invalid_subject"
)

// Reasons of integration events.
const (
	// ReasonDeadMessageNotFound: no dead message of that id (not_found).
	ReasonDeadMessageNotFound Reason = "dead_message_not_found"
)

// Reasons of the HTTP adapter: the request as sent.
const (
	// ReasonInvalidJSON: the body is empty, not JSON or not an object
	// (validation_error).
	ReasonInvalidJSON Reason = "invalid_json"
	// ReasonInvalidUTF8: the body is not valid UTF-8 (validation_error).
	ReasonInvalidUTF8 Reason = "invalid_utf8"
	// ReasonInvalidCharacter: a string holds U+0000 (validation_error).
	ReasonInvalidCharacter Reason = "invalid_character"
	// ReasonTooDeep: the JSON nests deeper than allowed
	// (validation_error).
	ReasonTooDeep Reason = "too_deep"
	// ReasonTrailingData: data after the JSON object (validation_error).
	ReasonTrailingData Reason = "trailing_data"
	// ReasonDuplicateKey: an object holds a key twice (validation_error).
	ReasonDuplicateKey Reason = "duplicate_key"
	// ReasonUnreadableBody: the body could not be read
	// (validation_error).
	ReasonUnreadableBody Reason = "unreadable_body"
	// ReasonContentType: the Content-Type is not application/json
	// (validation_error).
	ReasonContentType Reason = "content_type"
	// ReasonContentEncoding: a Content-Encoding other than identity
	// (unsupported_media_type).
	ReasonContentEncoding Reason = "content_encoding"
	// ReasonInvalidEnvelope: the body is not the envelope of its route
	// (validation_error, with fields).
	ReasonInvalidEnvelope Reason = "invalid_envelope"
	// ReasonInvalidID: an id in the path is not a (non-nil) UUID
	// (validation_error).
	ReasonInvalidID Reason = "invalid_id"
	// ReasonInvalidTypes: the types of an event stream are malformed
	// (validation_error).
	ReasonInvalidTypes Reason = "invalid_types"
	// ReasonInvalidResumePoint: Last-Event-ID or after is not an event id
	// (validation_error).
	ReasonInvalidResumePoint Reason = "invalid_resume_point"
	// ReasonIdempotencyKey: the Idempotency-Key header is malformed
	// (validation_error).
	ReasonIdempotencyKey Reason = "idempotency_key"
	// ReasonRouteNotFound: no such route (not_found).
	ReasonRouteNotFound Reason = "route_not_found"
	// ReasonBadRequest: a request the router refused with another 4xx
	// (validation_error).
	ReasonBadRequest Reason = "bad_request"
)

// Reasons of the HTTP adapter: authentication.
const (
	// ReasonInvalidToken: the token was sent and refused
	// (unauthenticated).
	ReasonInvalidToken Reason = "invalid_token"
	// ReasonTokenExpired: the token has expired (unauthenticated; also the
	// last frame of an event stream).
	ReasonTokenExpired Reason = "token_expired"
	// ReasonAuthorizationHeader: the Authorization header is not
	// "Bearer <token>" (unauthenticated).
	ReasonAuthorizationHeader Reason = "authorization_header"
	// ReasonJWKSUnavailable: the signing keys cannot be fetched
	// (unavailable).
	ReasonJWKSUnavailable Reason = "jwks_unavailable"
)

// Reasons of the HTTP adapter: the server's state and limits.
const (
	// ReasonIdempotencyUnavailable: the idempotency store is down
	// (unavailable).
	ReasonIdempotencyUnavailable Reason = "idempotency_unavailable"
	// ReasonNotReady: the service is not ready (unavailable).
	ReasonNotReady Reason = "not_ready"
	// ReasonShuttingDown: the server is shutting down (unavailable).
	ReasonShuttingDown Reason = "shutting_down"
	// ReasonTooManyStreams: the user holds too many open event streams
	// (rate_limited).
	ReasonTooManyStreams Reason = "too_many_streams"
	// ReasonStreamsExhausted: the server holds too many open event
	// streams (rate_limited).
	ReasonStreamsExhausted Reason = "streams_exhausted"
	// ReasonSlowClient: an event stream fell a whole buffer behind the
	// live events (the last frame of the stream, code overflow).
	ReasonSlowClient Reason = "slow_client"
)

// Reasons of the ops console.
const (
	// ReasonUnknownOperation: no operation of that name (not_found).
	ReasonUnknownOperation Reason = "unknown_operation"
	// ReasonMissingName: the operation names no consumer
	// (validation_error).
	ReasonMissingName Reason = "missing_name"
	// ReasonRebuildRunning: the projection is already being rebuilt
	// (projection_rebuild_in_progress).
	ReasonRebuildRunning Reason = "rebuild_running"
	// ReasonCrossOrigin: the request did not come from the console's own
	// origin (access_denied).
	ReasonCrossOrigin Reason = "cross_origin"
	// ReasonCSRFToken: the request lacks the session's CSRF token
	// (access_denied).
	ReasonCSRFToken Reason = "csrf_token"
	// ReasonNoDeadLetters: the app has no integration dead letters
	// (not_found).
	ReasonNoDeadLetters Reason = "no_dead_letters"
	// ReasonRetryFailed: the retry of a dead message failed
	// (unprocessable).
	ReasonRetryFailed Reason = "retry_failed"
)

// FieldCode is the code of one problem of a payload: the code member of
// a field problem (FieldError.Code, FieldProblem.Code, which are strings:
// convert with string(c)). Besides these, a failing validate tag is its
// own code ("email", "gte", …).
type FieldCode string

// The field problem codes.
const (
	// FieldCodeInvalidJSON: the value is not valid JSON.
	FieldCodeInvalidJSON FieldCode = "invalid_json"
	// FieldCodeType: the value is of the wrong type or shape.
	FieldCodeType FieldCode = "type"
	// FieldCodeRequired: the value is missing or empty.
	FieldCodeRequired FieldCode = "required"
	// FieldCodeUnknownField: the key names no field.
	FieldCodeUnknownField FieldCode = "unknown_field"
	// FieldCodeMax: the value, its length or its count is above the
	// bound.
	FieldCodeMax FieldCode = "max"
	// FieldCodeMin: the value is below the bound.
	FieldCodeMin FieldCode = "min"
	// FieldCodeOneOf: the value is not one of the allowed.
	FieldCodeOneOf FieldCode = "oneof"
	// FieldCodeNotSortable: a sort key names a field that is not
	// sortable.
	FieldCodeNotSortable FieldCode = "not_sortable"
	// FieldCodeDuplicate: a sort key is given twice.
	FieldCodeDuplicate FieldCode = "duplicate"
	// FieldCodeRange: a value the database cannot store, such as a time
	// outside years 1 to 9999.
	FieldCodeRange FieldCode = "range"
	// FieldCodeInvalidCharacter: text holds the NUL character.
	FieldCodeInvalidCharacter FieldCode = "invalid_character"
	// FieldCodeDuplicateKey: an object holds the key a second time (at
	// the path of the second).
	FieldCodeDuplicateKey FieldCode = "duplicate_key"
	// FieldCodePattern: the value does not have the required form.
	FieldCodePattern FieldCode = "pattern"
	// FieldCodeUUID: the value is not a UUID.
	FieldCodeUUID FieldCode = "uuid"
)
