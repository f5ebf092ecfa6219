package codec

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-playground/validator/v10"
	"github.com/google/uuid"

	"github.com/kumiko-go/kumiko/kumikotype"
)

var (
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	textMarshalerType   = reflect.TypeFor[encoding.TextMarshaler]()
	timeType            = reflect.TypeFor[time.Time]()
	uuidType            = reflect.TypeFor[uuid.UUID]()
	rawMessageType      = reflect.TypeFor[json.RawMessage]()
)

// fieldInfo is a struct field as encoding/json sees it, after promotion of
// embedded structs' fields.
type fieldInfo struct {
	name     string // JSON name
	typ      reflect.Type
	tag      reflect.StructTag
	tagged   bool // the JSON name comes from a tag
	asString bool // the ",string" option: the value is JSON-in-a-string
	depth    int
	index    []int
}

// goField maps a direct Go field to its JSON name ("" for an embedded struct
// whose fields are promoted), for translating validator namespaces.
type goField struct {
	jsonName string
	typ      reflect.Type
}

type structInfo struct {
	fields []fieldInfo
	byJSON map[string]int
	byGo   map[string]goField
}

// deref strips pointer types.
func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// opaque reports whether t decodes itself (time.Time, uuid.UUID,
// json.RawMessage, …): the registry checks its values by decoding them and
// does not look inside.
func opaque(t reflect.Type) bool {
	if t.Kind() == reflect.Interface {
		return false
	}
	p := reflect.PointerTo(t)
	return t.Implements(jsonUnmarshalerType) || p.Implements(jsonUnmarshalerType) ||
		t.Implements(textUnmarshalerType) || p.Implements(textUnmarshalerType)
}

func jsonTag(sf reflect.StructField) (name string, opts []string, skip bool) {
	tag := sf.Tag.Get("json")
	if tag == "-" {
		return "", nil, true
	}
	parts := strings.Split(tag, ",")
	return parts[0], parts[1:], false
}

// flatten lists t's JSON fields following encoding/json's rules for embedded
// structs. Names that encoding/json would silently drop as ambiguous are
// reported as problems.
func flatten(t reflect.Type) ([]fieldInfo, []string) {
	type level struct {
		typ   reflect.Type
		index []int
		depth int
	}
	var all []fieldInfo
	next := []level{{typ: t}}
	visited := map[reflect.Type]bool{}
	for len(next) > 0 {
		current := next
		next = nil
		for _, lv := range current {
			if visited[lv.typ] {
				continue
			}
			visited[lv.typ] = true
			for i := range lv.typ.NumField() {
				sf := lv.typ.Field(i)
				ft := sf.Type
				if sf.Anonymous {
					if ft.Kind() == reflect.Pointer {
						ft = ft.Elem()
					}
					if !sf.IsExported() && ft.Kind() != reflect.Struct {
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				name, opts, skip := jsonTag(sf)
				if skip {
					continue
				}
				index := append(slices.Clone(lv.index), i)
				if name != "" || !sf.Anonymous || ft.Kind() != reflect.Struct || opaque(ft) {
					fi := fieldInfo{name: name, typ: sf.Type, tag: sf.Tag, tagged: name != "", depth: lv.depth, index: index}
					if name == "" {
						fi.name = sf.Name
					}
					if slices.Contains(opts, "string") {
						switch deref(sf.Type).Kind() {
						case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
							reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
							reflect.Float32, reflect.Float64, reflect.String:
							fi.asString = true
						}
					}
					all = append(all, fi)
					continue
				}
				next = append(next, level{typ: ft, index: index, depth: lv.depth + 1})
			}
		}
	}
	byName := map[string][]fieldInfo{}
	for _, f := range all {
		byName[f.name] = append(byName[f.name], f)
	}
	var out []fieldInfo
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		fs := byName[name]
		minDepth := slices.MinFunc(fs, func(a, b fieldInfo) int { return a.depth - b.depth }).depth
		var top, tagged []fieldInfo
		for _, f := range fs {
			if f.depth == minDepth {
				top = append(top, f)
				if f.tagged {
					tagged = append(tagged, f)
				}
			}
		}
		switch {
		case len(top) == 1:
			out = append(out, top[0])
		case len(tagged) == 1:
			out = append(out, tagged[0])
		default:
			problems = append(problems, fmt.Sprintf("JSON name %q is used by %d fields at the same level; encoding/json would drop all of them", name, len(top)))
		}
	}
	slices.SortFunc(out, func(a, b fieldInfo) int { return slices.Compare(a.index, b.index) })
	return out, problems
}

func newStructInfo(t reflect.Type) (*structInfo, []string) {
	fields, problems := flatten(t)
	info := &structInfo{fields: fields, byJSON: map[string]int{}, byGo: map[string]goField{}}
	for i, f := range fields {
		info.byJSON[f.name] = i
	}
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.Anonymous && !sf.IsExported() {
			continue
		}
		name, _, skip := jsonTag(sf)
		switch {
		case skip:
			name = sf.Name
		case name == "" && sf.Anonymous && deref(sf.Type).Kind() == reflect.Struct && !opaque(deref(sf.Type)):
			// promoted: contributes no path segment
		case name == "":
			name = sf.Name
		}
		info.byGo[sf.Name] = goField{jsonName: name, typ: sf.Type}
	}
	return info, problems
}

// problem is something that makes a type unusable as a payload, at a path
// inside the type ("" = the type itself).
type problem struct {
	path string
	msg  string
}

// String is "path: message".
func (p problem) String() string {
	if p.path == "" {
		return p.msg
	}
	return p.path + ": " + p.msg
}

func joinPath(prefix, path string) string {
	switch {
	case prefix == "":
		return path
	case path == "":
		return prefix
	case strings.HasPrefix(path, "["):
		return prefix + path
	}
	return prefix + "." + path
}

// analyze records the struct types reachable from t and returns what makes t
// unusable as a payload: unsupported kinds, ambiguous JSON names, invalid
// validate tags, slices of tagged structs without `dive`.
func (c *Codec) analyze(t reflect.Type, path string) []problem {
	t = deref(t)
	if opaque(t) {
		return nil
	}
	switch t.Kind() {
	case reflect.Chan, reflect.Func, reflect.Complex64, reflect.Complex128, reflect.UnsafePointer, reflect.Uintptr:
		return []problem{{path, fmt.Sprintf("type %s cannot be encoded as JSON", t)}}
	case reflect.Slice, reflect.Array:
		return c.analyze(t.Elem(), path+"[]")
	case reflect.Map:
		k := t.Key()
		switch k.Kind() {
		case reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		default:
			if !k.Implements(textMarshalerType) || !reflect.PointerTo(k).Implements(textUnmarshalerType) {
				return []problem{{path, fmt.Sprintf("map key type %s cannot be a JSON object key", k)}}
			}
		}
		return c.analyze(t.Elem(), path+"{}")
	case reflect.Struct:
	default:
		return nil
	}
	problems := c.analyzeStruct(t)
	out := make([]problem, len(problems))
	for i, p := range problems {
		out[i] = problem{joinPath(path, p.path), p.msg}
	}
	return out
}

// analyzeStruct is analyze for a struct type, with paths relative to it.
// Results are cached; a type met again while being analyzed (a recursive
// type) adds nothing.
func (c *Codec) analyzeStruct(t reflect.Type) []problem {
	if problems, done := c.typeProblems[t]; done {
		return problems
	}
	c.typeProblems[t] = nil
	info, names := newStructInfo(t)
	c.structs[t] = info
	var problems []problem
	for _, msg := range names {
		problems = append(problems, problem{"", msg})
	}
	if msg := c.dryRunValidate(t); msg != "" {
		problems = append(problems, problem{"", msg})
	}
	for _, name := range slices.Sorted(maps.Keys(info.byGo)) {
		if gf := info.byGo[name]; gf.jsonName == "" {
			problems = append(problems, c.analyze(gf.typ, "")...)
		}
	}
	for _, f := range info.fields {
		fpath := joinKey("", f.name)
		problems = append(problems, c.analyze(f.typ, fpath)...)
		ft := deref(f.typ)
		if ft.Kind() == reflect.Slice || ft.Kind() == reflect.Array || ft.Kind() == reflect.Map {
			et := deref(ft.Elem())
			if et.Kind() == reflect.Struct && !opaque(et) && hasValidateTags(et, map[reflect.Type]bool{}) &&
				!slices.Contains(strings.Split(f.tag.Get("validate"), ","), "dive") {
				problems = append(problems, problem{fpath, `its elements carry validate tags but the field has no validate:"dive", so they would never be checked`})
			}
		}
	}
	slices.SortFunc(problems, func(a, b problem) int { return strings.Compare(a.String(), b.String()) })
	problems = slices.Compact(problems)
	c.typeProblems[t] = problems
	return problems
}

// dryRunValidate validates a zero value of struct type t, which makes the
// validator parse every tag of t: a tag it does not know panics here, at
// boot, rather than in a request.
func (c *Codec) dryRunValidate(t reflect.Type) (msg string) {
	defer func() {
		if p := recover(); p != nil {
			msg = fmt.Sprintf("invalid validate tag: %v", p)
		}
	}()
	_ = c.validate.Struct(reflect.New(t).Interface())
	return ""
}

func hasValidateTags(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	for i := range t.NumField() {
		sf := t.Field(i)
		if v := sf.Tag.Get("validate"); v != "" && v != "-" {
			return true
		}
		if ft := deref(sf.Type); ft.Kind() == reflect.Struct && !opaque(ft) && hasValidateTags(ft, seen) {
			return true
		}
	}
	return false
}

var identRe = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// joinKey appends an object key to a JSON path: a.b, or a["x y"] when the key
// is not an identifier.
func joinKey(path, key string) string {
	if identRe.MatchString(key) {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	return path + "[" + strconv.Quote(key) + "]"
}

func joinIndex(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// parseObject decodes raw as a JSON object with numbers kept as json.Number.
// Empty input and null read as an empty object.
func parseObject(raw []byte) (map[string]any, *ValidationError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, invalid(FieldError{Code: string(kumikotype.FieldCodeInvalidJSON), Message: "is not valid JSON: " + jsonErrText(err)})
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalid(FieldError{Code: string(kumikotype.FieldCodeInvalidJSON), Message: "has data after the JSON value"})
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, invalid(FieldError{Code: string(kumikotype.FieldCodeType), Message: "must be a JSON object"})
	}
	return obj, nil
}

// jsonErrText describes a syntax error without echoing input.
func jsonErrText(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("syntax error at offset %d", se.Offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "unexpected end of input"
	}
	return "malformed input"
}

// decodeStruct decodes raw into a new value of t (a struct or pointer to
// one), refusing unknown fields and wrong types with their paths, then runs
// the validate tags.
func (c *Codec) decodeStruct(t reflect.Type, raw []byte) (any, error) {
	obj, verr := parseObject(raw)
	if verr != nil {
		return nil, verr
	}
	var shape problems
	c.check(t, obj, "", &shape)
	base := deref(t)
	ptr := reflect.New(base)
	// obj now holds only what fits t: decode it, then run the validate tags
	// over it, so every problem is reported at once.
	norm, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", t, err)
	}
	if err := json.Unmarshal(norm, ptr.Interface()); err != nil {
		shape.fail("", kumikotype.FieldCodeType, "does not fit the payload type")
		return nil, shape.err()
	}
	if err := c.validateStruct(ptr.Interface()); err != nil {
		var ve *ValidationError
		if !errors.As(err, &ve) {
			return nil, err
		}
		// A tag failing under a value the shape check already refused
		// repeats that problem.
		for _, fe := range ve.Fields {
			if !slices.ContainsFunc(shape.fields, func(s FieldError) bool { return within(fe.Path, s.Path) }) {
				shape.add(fe)
			}
		}
		shape.omitted += ve.Omitted
	}
	if !shape.empty() {
		return nil, shape.err()
	}
	if t.Kind() == reflect.Pointer {
		return ptr.Interface(), nil
	}
	return ptr.Elem().Interface(), nil
}

// within reports whether JSON path p is at or below path q.
func within(p, q string) bool {
	if q == "" || p == q {
		return true
	}
	return strings.HasPrefix(p, q) && (p[len(q)] == '.' || p[len(q)] == '[')
}

func (c *Codec) validateStruct(v any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("validate %T: %v", v, p)
		}
	}()
	verr := c.validate.Struct(v)
	if verr == nil {
		return nil
	}
	var ves validator.ValidationErrors
	if !errors.As(verr, &ves) {
		return fmt.Errorf("validate %T: %w", v, verr)
	}
	root := reflect.TypeOf(v).Elem()
	var out problems
	for i, fe := range ves {
		if i >= MaxFieldErrors {
			out.omitted += len(ves) - i
			break
		}
		out.fail(c.namespacePath(root, fe.StructNamespace()), kumikotype.FieldCode(fe.Tag()), tagMessage(fe))
	}
	return out.err()
}

// check walks a generic JSON value against Go type t and reports unknown
// fields and type mismatches with their JSON paths. It cleans v in place as
// it goes, dropping unknown fields and values that do not fit, so the rest
// can still be decoded and validated; it returns false when v itself does
// not fit and must be dropped by the caller.
func (c *Codec) check(t reflect.Type, v any, path string, errs *problems) bool {
	if v == nil {
		return true // null decodes to the zero value; "required" tags catch it
	}
	t = deref(t)
	if opaque(t) {
		return c.checkOpaque(t, v, path, errs)
	}
	switch t.Kind() {
	case reflect.Interface:
		return true
	case reflect.Struct:
		return c.checkStruct(t, v, path, errs)
	case reflect.Slice, reflect.Array:
		return c.checkArray(t, v, path, errs)
	case reflect.Map:
		return c.checkMap(t, v, path, errs)
	}
	if msg := scalarMismatch(t, v); msg != "" {
		errs.fail(path, kumikotype.FieldCodeType, msg)
		return false
	}
	return true
}

// checkStruct is check for a struct type: an object whose members are the
// type's JSON fields.
func (c *Codec) checkStruct(t reflect.Type, v any, path string, errs *problems) bool {
	obj, ok := v.(map[string]any)
	if !ok {
		errs.fail(path, kumikotype.FieldCodeType, "must be an object")
		return false
	}
	info := c.structs[t]
	if info == nil {
		return c.checkOpaque(t, v, path, errs)
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		i, ok := info.byJSON[k]
		if !ok {
			errs.fail(joinKey(path, k), kumikotype.FieldCodeUnknownField, "is not a known field")
			delete(obj, k)
			continue
		}
		f := info.fields[i]
		fits := false
		if f.asString {
			fits = c.checkQuoted(f.typ, obj[k], joinKey(path, k), errs)
		} else {
			fits = c.check(f.typ, obj[k], joinKey(path, k), errs)
		}
		if !fits {
			delete(obj, k)
		}
	}
	return true
}

// checkArray is check for a slice or array type; a []byte is a base64
// string.
func (c *Codec) checkArray(t reflect.Type, v any, path string, errs *problems) bool {
	if t.Elem().Kind() == reflect.Uint8 && t.Kind() == reflect.Slice {
		if _, ok := v.(string); !ok {
			errs.fail(path, kumikotype.FieldCodeType, "must be a base64 string")
			return false
		}
		return c.checkOpaque(t, v, path, errs)
	}
	arr, ok := v.([]any)
	if !ok {
		errs.fail(path, kumikotype.FieldCodeType, "must be an array")
		return false
	}
	if t.Kind() == reflect.Array && len(arr) > t.Len() {
		errs.fail(path, kumikotype.FieldCodeMax, fmt.Sprintf("must have at most %d items", t.Len()))
		return false
	}
	for i, e := range arr {
		if !c.check(t.Elem(), e, joinIndex(path, i), errs) {
			arr[i] = nil
		}
	}
	return true
}

// checkMap is check for a map type; maps with other than string keys are
// checked by decoding.
func (c *Codec) checkMap(t reflect.Type, v any, path string, errs *problems) bool {
	obj, ok := v.(map[string]any)
	if !ok {
		errs.fail(path, kumikotype.FieldCodeType, "must be an object")
		return false
	}
	if t.Key().Kind() != reflect.String {
		return c.checkOpaque(t, v, path, errs)
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if !c.check(t.Elem(), obj[k], joinKey(path, k), errs) {
			delete(obj, k)
		}
	}
	return true
}

// scalarMismatch says why v does not fit scalar type t; "" when it fits.
func scalarMismatch(t reflect.Type, v any) string {
	switch t.Kind() {
	case reflect.String:
		if _, ok := v.(string); !ok {
			return "must be a string"
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return "must be a boolean"
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			return "must be an integer"
		}
		if _, err := strconv.ParseInt(n.String(), 10, t.Bits()); err != nil {
			return numberProblem(err, "an integer")
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(json.Number)
		if !ok {
			return "must be a non-negative integer"
		}
		if _, err := strconv.ParseUint(n.String(), 10, t.Bits()); err != nil {
			return numberProblem(err, "a non-negative integer")
		}
	case reflect.Float32, reflect.Float64:
		n, ok := v.(json.Number)
		if !ok {
			return "must be a number"
		}
		if _, err := strconv.ParseFloat(n.String(), t.Bits()); err != nil {
			return numberProblem(err, "a number")
		}
	default:
		return "has a type that cannot be decoded"
	}
	return ""
}

func numberProblem(err error, want string) string {
	if errors.Is(err, strconv.ErrRange) {
		return "is out of range"
	}
	return "must be " + want
}

// checkQuoted checks a field with the ",string" option: a JSON string that
// holds the encoded value.
func (c *Codec) checkQuoted(t reflect.Type, v any, path string, errs *problems) bool {
	if v == nil {
		return true
	}
	s, ok := v.(string)
	var inner any
	if ok {
		dec := json.NewDecoder(strings.NewReader(s))
		dec.UseNumber()
		ok = dec.Decode(&inner) == nil && inner != nil
	}
	if !ok {
		errs.fail(path, kumikotype.FieldCodeType, "must be a string holding the value")
		return false
	}
	return c.check(t, inner, path, errs)
}

// checkOpaque decodes v into a fresh value of t to see whether it fits. A
// time must also be one the database can store (see ParseTime).
func (c *Codec) checkOpaque(t reflect.Type, v any, path string, errs *problems) bool {
	raw, err := json.Marshal(v)
	dst := reflect.New(t)
	if err == nil {
		err = json.Unmarshal(raw, dst.Interface())
	}
	if err == nil && t == timeType {
		if _, code, msg := parseTime(dst.Elem().Interface()); code != "" {
			errs.fail(path, code, msg)
			return false
		}
	}
	if err == nil {
		return true
	}
	msg := "has an invalid value"
	switch t {
	case timeType:
		msg = "must be an RFC 3339 timestamp"
	case uuidType:
		msg = "must be a UUID"
	}
	errs.fail(path, kumikotype.FieldCodeType, msg)
	return false
}

// namespacePath turns a validator struct namespace (Go field names, e.g.
// "Order.Items[2].Name") into a JSON path ("items[2].name").
func (c *Codec) namespacePath(root reflect.Type, ns string) string {
	if name := root.Name(); name != "" {
		ns = strings.TrimPrefix(ns, name+".")
	}
	path := ""
	cur := root
	for ns != "" {
		end := strings.IndexAny(ns, ".[")
		if end < 0 {
			end = len(ns)
		}
		seg := ns[:end]
		ns = ns[end:]
		if seg != "" {
			info := c.structs[deref(cur)]
			gf, ok := goField{}, false
			if info != nil {
				gf, ok = info.byGo[seg]
			}
			if !ok {
				return joinKey(path, seg) + ns // unknown shape: keep the rest verbatim
			}
			if gf.jsonName != "" {
				path = joinKey(path, gf.jsonName)
			}
			cur = gf.typ
		}
		for strings.HasPrefix(ns, "[") {
			closeAt := strings.IndexByte(ns, ']')
			if closeAt < 0 {
				return path + ns
			}
			key := ns[1:closeAt]
			ns = ns[closeAt+1:]
			ct := deref(cur)
			switch ct.Kind() {
			case reflect.Map:
				path = joinKey(path, key)
				cur = ct.Elem()
			case reflect.Slice, reflect.Array:
				path += "[" + key + "]"
				cur = ct.Elem()
			default:
				path += "[" + key + "]"
			}
		}
		ns = strings.TrimPrefix(ns, ".")
	}
	return path
}

// tagMessage explains a failed validate tag in a sentence safe for clients.
func tagMessage(fe validator.FieldError) string {
	p := fe.Param()
	unit := ""
	switch fe.Kind() {
	case reflect.String:
		unit = " characters"
	case reflect.Slice, reflect.Array, reflect.Map:
		unit = " items"
	}
	switch fe.Tag() {
	case "required", "required_if", "required_unless", "required_with", "required_without",
		"required_with_all", "required_without_all":
		return "is required"
	case "max", "lte":
		return "must be at most " + p + unit
	case "min", "gte":
		return "must be at least " + p + unit
	case "lt":
		return "must be less than " + p + unit
	case "gt":
		return "must be greater than " + p + unit
	case "len", "eq":
		if unit != "" {
			return "must have exactly " + p + unit
		}
		return "must equal " + p
	case "ne":
		return "must not equal " + p
	case "oneof":
		return "must be one of: " + strings.Join(strings.Fields(p), ", ")
	case "email":
		return "must be an email address"
	case "url", "uri", "http_url":
		return "must be a URL"
	case "uuid", "uuid3", "uuid4", "uuid5", "uuid_rfc4122":
		return "must be a UUID"
	case "alpha":
		return "must contain letters only"
	case "alphanum":
		return "must contain letters and digits only"
	case "numeric", "number":
		return "must be numeric"
	case "datetime":
		return "must be a date/time of layout " + p
	case "unique":
		return "must not contain duplicates"
	}
	return "failed the " + fe.Tag() + " check"
}
