package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
)

// Client sends requests to a control socket: what the phaseshift command
// uses. Each request is one connection. Its methods are safe for
// concurrent use.
type Client struct {
	path string
}

// NewClient returns a Client of the socket at path. It does not connect.
func NewClient(path string) *Client { return &Client{path: path} }

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
		l, err := r.ReadBytes('\n')
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
