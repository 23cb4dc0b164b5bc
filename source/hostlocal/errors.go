package hostlocal

import "errors"

// Errors of Open and of what a caller passes in.
var (
	// ErrInvalid is returned when a network name, key, allocation, range
	// index or option cannot be stored in host-local's files as it is, so
	// that List would not give it back exactly (an empty container ID,
	// whitespace in an interface name, an address that is not in the form
	// host-local writes, a key of another network). The message says what
	// was wrong.
	ErrInvalid = errors.New("invalid argument")

	// ErrClosed is returned by every method of a Source after Close.
	ErrClosed = errors.New("source closed")
)

// Errors of reading host-local's files.
var (
	// ErrMalformed is returned, per file, when a file named after an
	// address (or a last_reserved_ip file) cannot be read as host-local
	// writes it: empty (host-local crashed between creating and writing
	// it), garbage, an owner that is not one container ID and interface
	// name, not a regular file. List reports such files in a
	// *source.ListError and lists the rest; the address stays reserved,
	// because host-local will not hand out an address whose file exists.
	ErrMalformed = errors.New("malformed file")
)

// Errors of Put.
var (
	// ErrReserved is returned by Put when an address is already reserved by
	// another key (or by a file List cannot read): host-local's own Reserve
	// refuses it, and so does Put, rather than overwrite another
	// container's reservation. Delete the holder first.
	ErrReserved = errors.New("address already reserved")
)

// Errors of locking.
var (
	// ErrLocked is returned when host-local's lock on the network directory
	// stayed held by another process (a host-local binary, another exec of
	// a plugin, another Source) until the context was done.
	ErrLocked = errors.New("network directory locked by another process")
)
