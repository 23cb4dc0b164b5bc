package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/phaseshift/phaseshift/internal/jsonvalue"
	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// listOptions are list's flags.
type listOptions struct {
	ignoreChecksum bool
	file           bool
}

func (o *listOptions) AddFlags(fs *flag.FlagSet) {
	addIgnoreChecksumFlag(fs, &o.ignoreChecksum)
	addFileFlag(fs, &o.file)
}

func newListCommand() *command {
	o := &listOptions{}
	return &command{
		name:    "list",
		summary: "print every entry as a JSON line {\"key\":...,\"value\":...}",
		args:    "PATH",
		about: `list prints the entries a daemon would restore from PATH, one JSON object
{"key":...,"value":...} per line, in the file's order, for jq. The output
holds the values: treat it as you treat the file. A file that is not intact
prints nothing and exits with its verdict; with --ignore-checksum, a
hand-edited file (checksum mismatch) is read as if its checksum held. When
some entries cannot be read (a key twice), list prints the others and exits 4.

When a daemon holds the checkpoint's lock and serves its control socket
(PATH.control.sock, package migrate/control), list prints the entries of
the daemon's Store instead, through the socket, sorted by key: what the
daemon serves. --file reads the file even then.`,
		examples: []string{
			"phaseshift list /var/run/ipamd/state.json | jq -c .key",
			"phaseshift list /var/run/ipamd/state.json | jq -c 'select(.value.ips | index(\"10.0.0.7\"))'",
			"phaseshift list --ignore-checksum /var/run/ipamd/state.json | wc -l",
		},
		addFlags: o.AddFlags,
		run:      func(ctx context.Context, e *env, args []string) error { return runList(ctx, e, o, args) },
	}
}

// getOptions are get's flags.
type getOptions struct {
	ignoreChecksum bool
	file           bool
}

func (o *getOptions) AddFlags(fs *flag.FlagSet) {
	addIgnoreChecksumFlag(fs, &o.ignoreChecksum)
	addFileFlag(fs, &o.file)
}

func newGetCommand() *command {
	o := &getOptions{}
	return &command{
		name:    "get",
		summary: "print one entry as a JSON line; KEY is JSON",
		args:    "PATH KEY",
		about: `get prints the entry of KEY in PATH as one JSON line {"key":...,"value":...}.
KEY is the key's JSON, as list prints it: '"c1"' for a string key, 42 for a
number, '{"network":"n1","containerID":"c1","ifName":"eth0"}' for a struct;
spacing and field order do not matter. It exits 1 if there is no such key.
When a daemon holds the checkpoint's lock and serves its control socket
(PATH.control.sock), get asks the daemon's Store through it (which finds
the key as the daemon's Get does); --file reads the file even then.`,
		examples: []string{
			"phaseshift get /var/run/ipamd/state.json '{\"network\":\"aws-cni\",\"containerID\":\"c1\",\"ifName\":\"eth0\"}'",
			"phaseshift get /var/run/vmproxy/state.json '\"vm-17\"' | jq .value",
			"phaseshift get /var/run/app/state.json -- -1",
		},
		addFlags: o.AddFlags,
		run:      func(ctx context.Context, e *env, args []string) error { return runGet(ctx, e, o, args) },
	}
}

func runList(ctx context.Context, e *env, o *listOptions, args []string) error {
	if err := wantArgs(args, "PATH"); err != nil {
		return err
	}
	if d := liveDaemon(args[0]); d != nil && !o.file && !o.ignoreChecksum {
		if served, err := d.liveList(ctx, e, args[0]); served {
			return err
		}
	}
	j := readFile(ctx, args[0], 0, o.ignoreChecksum)
	if j.verdict != verdictIntact && !(j.verdict == verdictCorrupt && len(j.Entries) > 0) {
		return j.failure()
	}
	w := bufio.NewWriter(e.out)
	for _, ent := range j.Entries {
		writeEntry(w, ent)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if j.verdict != verdictIntact {
		return fail(j.code(), "printed the %d readable entries; %s", len(j.Entries), j.reason)
	}
	return nil
}

func runGet(ctx context.Context, e *env, o *getOptions, args []string) error {
	if err := wantArgs(args, "PATH", "KEY"); err != nil {
		return err
	}
	key, err := parseKey(args[1])
	if err != nil {
		return err
	}
	if d := liveDaemon(args[0]); d != nil && !o.file && !o.ignoreChecksum {
		if served, err := d.liveGet(ctx, e, args[0], key); served {
			return err
		}
	}
	j := readFile(ctx, args[0], 0, o.ignoreChecksum)
	if j.verdict != verdictIntact {
		return j.failure()
	}
	i, err := findKey(j.Entries, key)
	if err != nil {
		return err
	}
	if i < 0 {
		return noSuchKey(j.Path, key)
	}
	w := bufio.NewWriter(e.out)
	writeEntry(w, j.Entries[i])
	return w.Flush()
}

// writeEntry writes an entry as the file holds it, one JSON line, its
// value compacted (see compactJSON).
func writeEntry(w io.Writer, ent rawfile.Entry) {
	fmt.Fprintf(w, "{\"key\":%s,\"value\":%s}\n", ent.Key, compactJSON(ent.Value))
}

// compactJSON returns v without the spaces between its tokens, which a
// file written by hand (and resealed) may hold: the output filter
// (printable) escapes a carriage return, which is whitespace to JSON only
// outside a string, and a line of JSON must not hold a newline.
func compactJSON(v json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return v // not JSON: Load would not have returned it
	}
	return b.Bytes()
}

func parseKey(s string) (rawfile.Key, error) {
	k, err := rawfile.ParseKey(s)
	if err != nil {
		return "", usageError("KEY: %v: give the key as JSON, as phaseshift list prints it: '\"c1\"' for a string key, "+
			"'{\"network\":\"n1\",\"containerID\":\"c1\"}' for a struct key (quote it for the shell)", err)
	}
	return k, nil
}

func noSuchKey(path string, key rawfile.Key) error {
	return fail(exitNo, "no entry with key %s in %s: see the keys with phaseshift list %s | jq -c .key", key, path, path)
}

// findKey returns the position of key in ents, or -1. A key matches by its
// compacted JSON text, as the file writes it, or failing that by its JSON
// value (field order, number spelling such as 1e2 and escapes aside), so
// that an operator need not type a struct's fields in the writer's order.
func findKey(ents []rawfile.Entry, key rawfile.Key) (int, error) {
	for i, e := range ents {
		if e.Key == key {
			return i, nil
		}
	}
	want, err := jsonvalue.Decode([]byte(key))
	if err != nil {
		return -1, nil
	}
	found := -1
	for i, e := range ents {
		got, err := jsonvalue.Decode([]byte(e.Key))
		if err != nil || !jsonvalue.Equal(got, want) {
			continue
		}
		if found >= 0 {
			return -1, usageError("KEY matches the keys %s and %s by value: give it exactly as phaseshift list prints it", ents[found].Key, e.Key)
		}
		found = i
	}
	return found, nil
}
