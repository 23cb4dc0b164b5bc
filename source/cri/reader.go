package cri

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/phaseshift/phaseshift/source"
)

// Reader returns a source.Reader over the ready sandboxes of l. fn maps a
// sandbox to a key and value, or returns false to leave it out (a sandbox of
// another network, or without an IP). An IPAM daemon maps each IP to an
// allocation; fn is called once per sandbox per List, never concurrently.
//
// List passes a partial listing through: it returns the entries of the
// sandboxes that could be read together with the *source.ListError. When
// two sandboxes map to the same key (a pod restarted under a new sandbox
// while the old one lingers, or an address reused), List keeps the newer by
// CreatedAt, or the later by ID when their times are equal, and reports the
// other with [ErrDuplicateKey] in the ListError rather than drop it silently.
//
// The Reader does not implement source.Writer: the runtime learns of
// sandboxes by creating them, so nothing is written back to it (see package
// source, "Explicit and implicit writes").
//
// Reader fails with [ErrInvalidOption] when l or fn is nil, so that the
// mistake shows when the daemon is set up rather than at its first restore.
func Reader[K comparable, V any](l *Lister, fn func(Sandbox) (K, V, bool)) (source.Reader[K, V], error) {
	switch {
	case l == nil:
		return nil, fmt.Errorf("cri: %w: cri.Reader: the Lister is nil: make one with cri.NewLister", ErrInvalidOption)
	case fn == nil:
		return nil, fmt.Errorf("cri: %w: cri.Reader: the mapping function is nil: "+
			"pass one that turns a Sandbox into a key and value", ErrInvalidOption)
	}
	return &reader[K, V]{l: l, fn: fn}, nil
}

// reader deliberately has no Put or Delete; see Reader.
type reader[K comparable, V any] struct {
	l  *Lister
	fn func(Sandbox) (K, V, bool)
}

func (r *reader[K, V]) List(ctx context.Context) (map[K]V, error) {
	sandboxes, err := r.l.Sandboxes(ctx)
	var listErr *source.ListError
	if err != nil && !errors.As(err, &listErr) {
		return nil, err
	}
	var errs []error
	if listErr != nil {
		errs = append(errs, listErr.Errs...)
	}

	entries := make(map[K]V, len(sandboxes))
	owner := make(map[K]Sandbox, len(sandboxes)) // which sandbox each entry came from
	for _, sb := range sandboxes {
		key, value, ok := r.fn(sb)
		if !ok {
			continue
		}
		prev, clash := owner[key]
		if !clash {
			entries[key], owner[key] = value, sb
			continue
		}
		kept, dropped := prev, sb
		if newer(sb, prev) {
			kept, dropped = sb, prev
			entries[key], owner[key] = value, sb
		}
		errs = append(errs, &SandboxError{
			ID:        dropped.ID,
			Namespace: dropped.Namespace,
			Name:      dropped.Name,
			Err: fmt.Errorf("cri: %w %v: kept sandbox %s (pod %s/%s), created %s, the newer",
				ErrDuplicateKey, key, kept.ID, kept.Namespace, kept.Name, kept.CreatedAt.UTC().Format(time.RFC3339Nano)),
		})
	}
	if len(errs) > 0 {
		return entries, &source.ListError{Errs: errs}
	}
	return entries, nil
}

// newer reports whether a should win a key over b. Sandboxes arrive sorted
// by ID, so the tie-break by ID keeps the outcome independent of timing.
func newer(a, b Sandbox) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.After(b.CreatedAt)
	}
	return a.ID > b.ID
}
