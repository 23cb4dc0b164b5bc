package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

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
	// encoding/json keeps the last of a field given twice: such a key
	// would read back as itself, and name another entry than the first.
	var dup *jsonvalue.DuplicateFieldError
	if _, err := jsonvalue.Decode(raw); errors.As(err, &dup) {
		return k, nil, fmt.Errorf("the key has the field %q twice: give each field once", dup.Field)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&k); err != nil {
		return k, nil, fmt.Errorf("the key does not decode as the daemon's key type %T: %s", k, jsonvalue.DecodeFailure(err))
	}
	canon, err = json.Marshal(k)
	if err != nil || !jsonvalue.SameText(canon, raw) {
		return k, nil, fmt.Errorf("the key does not read back as itself as the daemon's key type %T (a field it drops or a value it changes): give the key as phaseshift list prints it", k)
	}
	return k, canon, nil
}
