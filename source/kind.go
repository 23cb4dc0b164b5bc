package source

import "fmt"

// Kind is what a legacy source is, as far as a restore must know: whether
// the Store writes it, and whether what it holds survives the process that
// wrote it. A restore takes a legacy's word only for what its kind can
// know (package migrate, "Evidence, not inference").
type Kind int

const (
	// Unknown is the zero Kind: the source does not say. migrate.New
	// refuses a legacy that takes explicit writes and whose kind it
	// cannot tell, rather than guess.
	Unknown Kind = iota
	// Durable is a legacy the Store writes that survives a restart and a
	// crash of the process: a file, a database, host-local's directory.
	// It holds every write the previous binary acknowledged.
	Durable
	// Volatile is a legacy the Store writes that dies with the process: a
	// registry kept in memory. It is empty after every restart, and its
	// emptiness is never evidence of anything.
	Volatile
	// Observing is a legacy someone else keeps current, which the Store
	// never writes: the container runtime's pod sandboxes over CRI. Its
	// listing lags in both directions (a sandbox is listed only after its
	// network is set up, and a stopped one stays listed until removed).
	Observing
)

var kindNames = [...]string{Unknown: "unknown", Durable: "durable", Volatile: "volatile", Observing: "observing"}

// String returns the kind's name: "durable", "volatile", "observing" or
// "unknown".
func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return fmt.Sprintf("Kind(%d)", int(k))
	}
	return kindNames[k]
}

// Kinded is implemented by a legacy source that can say what it is. A
// source built on a file implements it with Durable; [Map], a registry in
// memory, implements it with Volatile.
type Kinded interface {
	LegacyKind() Kind
}

// KindOf returns what r says it is: its [Kinded] kind; Observing for a
// Reader that takes no writes (nothing the Store does reaches it, so
// someone else keeps it current); Unknown for a [Writer] that does not say.
func KindOf[K comparable, V any](r Reader[K, V]) Kind {
	if k, ok := r.(Kinded); ok {
		return k.LegacyKind()
	}
	if _, ok := r.(Writer[K, V]); ok {
		return Unknown
	}
	return Observing
}

// LegacyKind is Volatile: a Map lives in the process's memory and is empty
// after every restart.
func (m *Map[K, V]) LegacyKind() Kind { return Volatile }

// LegacyKind is Observing: a Func only lists.
func (f Func[K, V]) LegacyKind() Kind { return Observing }
