// Package registry compiles features into an immutable, validated
// [Registry]: the single description of the application that the pipeline,
// the HTTP layer and the event store consult at run time.
//
// [Build] checks every rule the framework relies on (unique lowercase dotted
// names, well-formed entity fields and defaults, struct payloads with valid
// `validate` tags, handler signatures, complete upcaster chains, apply maps
// naming defined events, deny-by-default access) and reports all violations
// at once, each naming the feature and the item, so nothing fails deep inside
// a request later.
//
// At run time the registry
//   - resolves handlers, entities, events and projections by name;
//   - decodes and validates payloads ([Registry.DecodePayload]): unknown
//     fields are refused and every problem is reported with its JSON path;
//   - validates CRUD input against entity fields
//     ([Registry.ValidateEntityInput]);
//   - serves JSON Schemas of every payload ([Registry.Schema]);
//   - upcasts stored events to the current version ([Registry.Upcast]),
//     implementing the event store's Upcaster;
//   - says which feature may append which event ([Registry.CanEmit]).
//
// The features reach Build as the records of internal/spec; the payload
// codec behind DecodePayload, ValidateEntityInput and Schema is
// registry/internal/codec, whose input and error types this package names
// as aliases.
//
// # CRUD contract
//
// For an entity e the registry defines the events e.created (payload: the
// entity's fields after defaults, as normalised by ValidateEntityInput),
// e.updated (the changed fields only), e.deleted and, with soft delete,
// e.restored (both an empty object). They exist whether or not the feature
// declares Crud, so commands may append them too. Their current version is 1
// unless the owning feature declares migrations for them, in which case it is
// the end of the migration chain.
//
// The generated handlers decode to [CreateInput], [UpdateInput], [IDInput]
// (delete, restore), [DetailInput] and [ListInput].
package registry
