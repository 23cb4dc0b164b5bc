package main

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"time"
)

// VM is what the proxy knows about one registered VM: the value the
// checkpoint keeps under the VM's ID. An operator reads it with jq, so the
// JSON names are part of the checkpoint's schema (checkpoint.WithSchema):
// change their meaning and the schema number must go up.
//
// A VM is treated as immutable once it is in the Store: the Store hands out
// its committed values as Go copies them, and the maps below would be shared
// with committed state. Every change works on a clone (see proxy.update).
type VM struct {
	// Console is the path of the VM's console socket, as the runtime gave it.
	Console string `json:"console,omitempty"`

	// Registered is when the VM was registered.
	Registered time.Time `json:"registered"`

	// Attached counts the attach requests: how many times a runtime
	// attached to the VM after registering it.
	Attached int `json:"attached,omitempty"`

	// Tokens are the I/O tokens handed out for this VM, by token value.
	// A token is a secret: whoever presents it gets the I/O stream of a
	// process in the VM, so it is never logged.
	Tokens map[string]Token `json:"tokens,omitempty"`

	// Sessions are the open I/O sessions, by session ID.
	Sessions map[string]Session `json:"sessions,omitempty"`
}

// Token is one I/O token of a VM.
type Token struct {
	// Created is when the proxy generated the token.
	Created time.Time `json:"created"`
}

// Session is one open I/O session: a shim that presented a token.
type Session struct {
	// Token is the token the session was opened with; at most one open
	// session holds a given token.
	Token string `json:"token"`

	// Opened is when the session was opened.
	Opened time.Time `json:"opened"`
}

// clone returns a copy of vm that shares no memory with it, so that a
// change to the copy cannot reach committed state before it is stored.
func (vm VM) clone() VM {
	vm.Tokens = maps.Clone(vm.Tokens)
	vm.Sessions = maps.Clone(vm.Sessions)
	return vm
}

// sessionOf returns the ID of the open session that holds token, if any.
func (vm VM) sessionOf(token string) (string, bool) {
	for id, s := range vm.Sessions {
		if s.Token == token {
			return id, true
		}
	}
	return "", false
}

// validateVM is the checkpoint's WithValidate function: it rejects a record
// the proxy would never have stored, so that a restart does not serve one a
// hand edit, a bug in another version or a bad disk left behind. A record
// it rejects is a bad entry: the proxy serves the others and logs the VM's
// ID, or with --error-on-failure-to-restore refuses to start. Its errors
// name IDs, never a token: a token is a secret.
func validateVM(id string, vm VM) error {
	if err := checkID(id); err != nil {
		return fmt.Errorf("the VM's ID is not one register accepts: %w", err)
	}
	if vm.Console != "" && !filepath.IsAbs(vm.Console) {
		return errors.New("its console is not an absolute path")
	}
	if vm.Attached < 0 {
		return errors.New("its attach count is negative")
	}
	holder := make(map[string]string, len(vm.Sessions))
	for _, sid := range slices.Sorted(maps.Keys(vm.Sessions)) {
		tok := vm.Sessions[sid].Token
		switch _, issued := vm.Tokens[tok]; {
		case tok == "":
			return fmt.Errorf("session %q has no token", sid)
		case !issued:
			return fmt.Errorf("session %q holds a token the VM never issued", sid)
		case holder[tok] != "":
			return fmt.Errorf("sessions %q and %q hold the same token", holder[tok], sid)
		}
		holder[tok] = sid
	}
	if _, ok := vm.Tokens[""]; ok {
		return errors.New("it has an empty token")
	}
	return nil
}
