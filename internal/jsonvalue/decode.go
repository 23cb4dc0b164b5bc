package jsonvalue

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// DecodeFailure describes an error of json.Unmarshal (or of a
// json.Decoder) without its text, which may quote the input: netip.Addr,
// time.Time and json.Number quote what they were given, and an
// UnmarshalJSON method's error is the type's own text.
func DecodeFailure(err error) string {
	var (
		te *json.UnmarshalTypeError
		se *json.SyntaxError
	)
	switch {
	case errors.As(err, &te):
		kind, _, _ := strings.Cut(te.Value, " ") // "number 1234" quotes the number
		field := ""
		if te.Field != "" {
			field = " in field " + te.Field
		}
		return fmt.Sprintf("a JSON %s%s where Go type %v is expected", kind, field, te.Type)
	case errors.As(err, &se):
		return fmt.Sprintf("it is not valid JSON (at offset %d)", se.Offset)
	}
	if name, ok := UnknownField(err); ok {
		return fmt.Sprintf("it has a field %q that the Go type does not have", name)
	}
	return fmt.Sprintf("its decoder failed (%T; its message is not shown, as it may quote the value)", err)
}

// UnknownField reports whether err is a json.Decoder's error for a field
// its target does not have (with DisallowUnknownFields), and which. The
// decoder has no error type for it, only the text `json: unknown field
// "name"`; the name is a field name, not a value, and is cut short.
func UnknownField(err error) (string, bool) {
	const prefix = "json: unknown field "
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		return "", false
	}
	name, uerr := strconv.Unquote(msg[len(prefix):])
	if uerr != nil {
		name = "?"
	}
	if len(name) > 64 {
		name = name[:64] + "..."
	}
	return name, true
}
