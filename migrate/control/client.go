package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
)

// Client sends requests to a control socket: what the phaseshift command
// uses. Each request is one connection. Its methods are safe for
// concurrent use.
type Client struct {
	path   string
	expect *expected // nil: any server
}

// expected is who a Client accepts as the server of its socket.
type expected struct {
	pid  int      // 0: any process
	uids []uint32 // empty: any user
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// ExpectServer makes the Client check who serves the socket before it
// sends anything (SO_PEERCRED of the listening process): the process pid
// (0: any), of one of uids (none: any). Anything else fails with
// ErrNotTheDaemon. The phaseshift command passes the process that holds
// the checkpoint's lock and the users that may own it (root, and the lock
// file's owner), so that a socket another user bound at the name, where
// the directory let it, is not taken for the daemon's.
func ExpectServer(pid int, uids ...uint32) ClientOption {
	return func(c *Client) { c.expect = &expected{pid: pid, uids: uids} }
}

// NewClient returns a Client of the socket at path. It does not connect.
func NewClient(path string, opts ...ClientOption) *Client {
	c := &Client{path: path}
	for _, o := range opts {
		o(c)
	}
	return c
}

// checkServer returns nil if the process at the other end of conn is the
// one c expects.
func (c *Client) checkServer(conn net.Conn) error {
	if c.expect == nil {
		return nil
	}
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("control: %s: %w: not a unix socket", c.path, ErrNotTheDaemon)
	}
	p, err := peerOf(uc)
	if err != nil {
		return fmt.Errorf("control: %s: asking the kernel who serves it (SO_PEERCRED): %w", c.path, err)
	}
	if c.expect.pid > 0 && int(p.pid) != c.expect.pid {
		return fmt.Errorf("control: %s: %w: PID %d (uid %d) serves it, and PID %d holds the checkpoint's lock", c.path, ErrNotTheDaemon, p.pid, p.uid, c.expect.pid)
	}
	if len(c.expect.uids) > 0 && !slices.Contains(c.expect.uids, p.uid) {
		return fmt.Errorf("control: %s: %w: PID %d of uid %d serves it, which may not own the checkpoint (uids %v)", c.path, ErrNotTheDaemon, p.pid, p.uid, c.expect.uids)
	}
	return nil
}

// ListResult is what a list said besides its entries.
type ListResult struct {
	Count     int // entries listed
	LossyKeys int // keys that do not read back as themselves: get and delete cannot name them
}

// List calls fn with each entry's line, {"key":K,"value":V}, in the order
// of the keys' JSON, and returns the daemon's status. It stops at fn's
// first error.
func (c *Client) List(ctx context.Context, fn func(line []byte) error) (ListResult, error) {
	st, err := c.do(ctx, request{Op: "list"}, fn)
	return ListResult{Count: st.Count, LossyKeys: st.LossyKeys}, err
}

// Get returns the line of key's entry, {"key":K,"value":V}; the error
// matches ErrNoSuchKey when there is none.
func (c *Client) Get(ctx context.Context, key json.RawMessage) ([]byte, error) {
	var line []byte
	_, err := c.do(ctx, request{Op: "get", Key: key}, func(l []byte) error {
		line = bytes.Clone(l)
		return nil
	})
	return line, err
}

// Delete deletes key's entry through the daemon's Store; the error matches
// ErrNoSuchKey when there is none.
func (c *Client) Delete(ctx context.Context, key json.RawMessage) error {
	_, err := c.do(ctx, request{Op: "delete", Key: key}, nil)
	return err
}

// RestoreReport is what the daemon says of its restore (WithReport): the
// Report's line, and the keys of the orphaned and diverged entries it left
// that are still as it left them, sorted by their JSON.
type RestoreReport struct {
	Line     string
	Orphaned []json.RawMessage
	Diverged []json.RawMessage
}

// Report asks the daemon for its restore's report; the error matches
// ErrNoReport when it serves none.
func (c *Client) Report(ctx context.Context) (RestoreReport, error) {
	var r RestoreReport
	st, err := c.do(ctx, request{Op: "report"}, func(l []byte) error {
		var line struct {
			Kind string          `json:"kind"`
			Key  json.RawMessage `json:"key"`
		}
		if err := json.Unmarshal(l, &line); err != nil {
			return fmt.Errorf("control: the daemon's answer is not a report line")
		}
		switch line.Kind {
		case "orphaned":
			r.Orphaned = append(r.Orphaned, line.Key)
		case "diverged":
			r.Diverged = append(r.Diverged, line.Key)
		}
		return nil
	})
	r.Line = st.Report
	return r, err
}

// PruneResult is what a prune did with one key.
type PruneResult struct {
	Key    json.RawMessage
	Pruned bool   // deleted through the Store
	Reason string // why not: not an orphan of the last restore, gone, or written since
}

// PruneOrphans asks the daemon to delete the entries of keys, each only if
// it is an orphan of its last restore still as restore left it, in one
// commit of its Store, and returns what it did with each. keys are the
// Orphaned keys of Report, which the operator confirmed.
func (c *Client) PruneOrphans(ctx context.Context, keys []json.RawMessage) ([]PruneResult, error) {
	var out []PruneResult
	_, err := c.do(ctx, request{Op: "prune-orphans", Keys: keys}, func(l []byte) error {
		var r struct {
			Key    json.RawMessage `json:"key"`
			Pruned bool            `json:"pruned"`
			Reason string          `json:"reason"`
		}
		if err := json.Unmarshal(l, &r); err != nil {
			return fmt.Errorf("control: the daemon's answer is not a prune line")
		}
		out = append(out, PruneResult{Key: r.Key, Pruned: r.Pruned, Reason: r.Reason})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// do sends req and reads the answer: entry lines to fn, then the status.
// A dial error is returned as it is (errors.Is finds the errno: a socket
// nobody serves is ECONNREFUSED, one this user cannot open EACCES).
func (c *Client) do(ctx context.Context, req request, fn func([]byte) error) (status, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.path)
	if err != nil {
		return status{}, err
	}
	defer conn.Close()
	if err := c.checkServer(conn); err != nil {
		return status{}, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	line, _ := json.Marshal(req) // a string and raw JSON: cannot fail
	// A write error is not the end: a refusing daemon answers, and closes,
	// before it reads the request.
	_, _ = conn.Write(append(line, '\n'))
	r := bufio.NewReaderSize(conn, 64<<10)
	for {
		l, err := readLine(r, maxAnswerLine)
		if err != nil {
			return status{}, fmt.Errorf("control: reading the answer of %s: %w", c.path, err)
		}
		if bytes.HasPrefix(l, []byte(`{"status":`)) {
			return parseStatus(l)
		}
		if fn != nil {
			if err := fn(l); err != nil {
				return status{}, err
			}
		}
	}
}

// maxAnswerLine is the longest answer line a Client reads: one entry of a
// list (its key and value as JSON), a status line. Whatever serves the
// socket (a daemon gone wrong, or another user's process where one could
// bind the name) cannot make the command hold more than this per line.
const maxAnswerLine = 4 << 20

// errLineTooLong is returned for an answer line longer than maxAnswerLine.
var errLineTooLong = fmt.Errorf("an answer line is longer than %d MiB, more than any entry this package serves", maxAnswerLine>>20)

// readLine reads one line of at most max bytes, its newline included.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
		if err == nil {
			return line, nil
		}
		if err != bufio.ErrBufferFull {
			return nil, err
		}
	}
}

func parseStatus(line []byte) (status, error) {
	var st status
	if err := json.Unmarshal(line, &st); err != nil {
		return st, fmt.Errorf("control: the daemon's answer is not a status line")
	}
	if st.Status != "ok" {
		return st, &RemoteError{Code: st.Code, Message: st.Error}
	}
	return st, nil
}
