package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/phaseshift/phaseshift/internal/jsonvalue"
)

// decodeKey decodes a request's key into K and checks that it reads back
// as itself: encoded again (canon), it is the same JSON value. A key that loses a
// field (one K does not have, or one K's encoding drops) or changes a value
// would name another entry than the one the operator typed. Its errors
// never quote the key's values.
func decodeKey[K comparable](raw json.RawMessage) (k K, canon []byte, err error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return k, nil, errors.New(`the request has no key: give {"op":"get","key":K}`)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&k); err != nil {
		return k, nil, fmt.Errorf("the key does not decode as the daemon's key type %T: %s", k, decodeFailure(err))
	}
	canon, err = json.Marshal(k)
	if err != nil || !jsonvalue.SameText(canon, raw) {
		return k, nil, fmt.Errorf("the key does not read back as itself as the daemon's key type %T (a field it drops or a value it changes): give the key as phaseshift list prints it", k)
	}
	return k, canon, nil
}

// decodeFailure says what kind of JSON error err is, without the parts of
// encoding/json's messages that quote the input.
func decodeFailure(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("not valid JSON (at byte %d)", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("a JSON %s where %s has a %s", te.Value, fieldOf(te), te.Type)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "it has " + strings.TrimPrefix(err.Error(), "json: ") + ", which the type does not have"
	}
	return "not a JSON value of that type"
}

func fieldOf(te *json.UnmarshalTypeError) string {
	if te.Field == "" {
		return "the key"
	}
	return "field " + te.Field
}
