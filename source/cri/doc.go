// Package cri lists the ready pod sandboxes of a container runtime over the
// Kubernetes Container Runtime Interface (CRI v1), as a legacy source for a
// node daemon, such as an IPAM daemon, that learned its state from the
// runtime before it kept a checkpoint file.
//
// # Pointing it at the runtime
//
// [NewLister] takes the runtime's CRI socket, as a unix:// endpoint or a plain
// absolute path, the same value as the kubelet's --container-runtime-endpoint:
//
//	containerd: unix:///run/containerd/containerd.sock
//	CRI-O:      unix:///var/run/crio/crio.sock
//
// A daemon running in a pod needs the socket's directory mounted from the
// host (a hostPath volume of the directory, not of the socket file: a
// hostPath mount of a socket that does not exist yet creates a directory in
// its place) and permission to read and write the socket, which usually
// means running as root.
//
// NewLister does no I/O, so a daemon may start before the runtime does:
// the first I/O is the first call to [Lister.Runtime] or [Lister.Sandboxes].
// Each call checks that the socket exists; unless the Lister's connection
// is up, it checks that a gRPC server answers on the socket (a connection
// of its own, on which a gRPC server speaks first) and connects, afresh if
// gRPC was waiting out its reconnect backoff; and on the first successful
// contact it asks the runtime for its version ([Lister.Runtime]). So the
// same Lister serves a runtime that starts late, crashes, or restarts: the
// calls while it is down fail at once, and the first call after it listens
// again succeeds.
//
// [Lister.Sandboxes] returns the ready sandboxes with their pod identity and
// IPs; [Reader] turns them into a source.Reader of the daemon's own keys and
// values for package migrate.
//
// # Errors and what to do about them
//
// Errors are matched with errors.Is against this package's sentinels and
// still wrap the gRPC status the call failed with, or would have failed
// with when the failure was found before it (status.Code works on them),
// and the OS error beneath, if any. Every message names the socket or the
// endpoint.
//
//   - [ErrSocketMissing]: nothing at the socket path, or not a socket. The
//     runtime is not running or listens elsewhere; check the endpoint and
//     the hostPath mount, and start the runtime (systemctl status
//     containerd, or crio).
//   - [ErrRuntimeNotResponding]: the socket exists but nothing answers on
//     it. "connection refused" means a stale socket file from a runtime that
//     stopped or crashed: restart the runtime. "permission denied" means the
//     daemon cannot use the socket: run it as root or fix the socket's mode.
//   - [ErrTimeout]: the runtime accepted the connection or the call but did
//     not answer within the timeout ([WithTimeout], 5s by default) or the
//     caller's deadline. The runtime is overloaded or hung (a process
//     stopped with SIGSTOP is); crictl pods against the same endpoint shows
//     which. It also matches ErrRuntimeNotResponding.
//   - [ErrNotCRIEndpoint]: something listens on the socket but answers in
//     another protocol than gRPC: containerd's ttrpc socket
//     (containerd.sock.ttrpc, the message asks "is it the .ttrpc socket?
//     use containerd.sock"), an HTTP/1 server, a server that greets with a
//     banner. Fix the endpoint. A server that accepts connections and never
//     says anything cannot be told from a hung runtime: that is ErrTimeout.
//   - [ErrUnsupportedAPI]: the runtime does not serve CRI v1. The message
//     names it when it says what it is (containerd before 1.6 may serve
//     only v1alpha2). Upgrade to containerd 1.6 or later, or CRI-O 1.26 or
//     later, the releases Kubernetes 1.26 requires.
//   - [ErrResponseTooLarge]: the sandbox list is larger than the receive
//     limit; raise it with [WithMaxReceiveSize].
//   - [ErrInvalidEndpoint], [ErrInvalidOption]: a configuration mistake,
//     reported by NewLister or [Reader] when the daemon is set up rather
//     than at its first listing.
//   - [ErrClosed]: the Lister was closed.
//
// A failure that concerns one sandbox does not fail the listing: Sandboxes
// returns the other sandboxes with a *source.ListError holding one
// [*SandboxError] per sandbox left out, naming its ID and pod (look at it
// with crictl inspectp <ID>). [ErrInvalidIP] and [ErrNoStatus] are such
// failures, as is a status call that fails or times out for that sandbox
// alone. A runtime that stops answering part way through (its socket gone,
// the connection refused, or 8 status calls in a row timed out) fails the
// whole listing instead, since the sandboxes not yet read are unknown in
// number.
//
// # Limits and defaults
//
// The receive limit is 16 MiB ([DefaultMaxReceiveSize]), the kubelet's,
// rather than gRPC's 4 MiB: ListPodSandbox returns every sandbox's labels
// and annotations in one message, and a node with a few thousand pods, each
// with a kilobyte of annotations, exceeds 4 MiB. Status calls run at most 8
// at a time, so that thousands of sandboxes do not open thousands of
// streams on the runtime at once.
//
// Host-network sandboxes are left out unless [WithHostNetworkSandboxes] is
// given: they share the node's network namespace and hold no pod IP of
// their own, so there is no allocation to restore for them, and any address
// a runtime reports for them belongs to the node, which an IPAM daemon must
// never take as its own.
//
// Sandboxes that are not ready (stopped, or failed to start) are left out
// too: their network has been, or is being, torn down by a CNI DEL.
//
// # Caveats
//
// CRI does not record the CNI network name or interface name a sandbox was
// set up with, only its IPs. The CNI spec keys IPAM state by (network name,
// container ID, interface name), so entries learned from CRI need
// placeholders for the two missing parts, and lookups with the real key
// must still find them by container ID. The AWS VPC CNI uses network
// "_migrated-from-cri" and interface "unknown" (amazon-vpc-cni-k8s #1123);
// migrate.Config.Match is where a daemon says that such keys match.
//
// A listing is a point-in-time view. A pod created or deleted while it runs
// may or may not be in it; a sandbox deleted between the list and its status
// call is left out without error. A daemon that restores from CRI must
// itself be ready to see CNI ADD and DEL calls for sandboxes it has not yet
// learned of.
//
// Only the pod's primary network and the additional IPs the runtime
// reports are seen: a sandbox with several interfaces (Multus) reports only
// the addresses its runtime chose to report.
//
// A call made while the Lister's connection is not up (the first one, and
// the first after the runtime went away) opens one more connection to the
// socket, to see that a gRPC server answers: it reads the server's HTTP/2
// greeting and hangs up, which a gRPC server takes without a word. A
// runtime slower than 200 ms to greet gets a second such connection,
// which carries a ttrpc request and which a gRPC runtime may log as a
// bogus greeting. While the connection is up, calls make no such check.
//
// Only CRI v1 is spoken, and only over a local unix socket. The v1alpha2
// API is asked for nothing but the runtime's name, to say what to upgrade.
//
// The runtime is never written: the Reader does not implement
// source.Writer, because the runtime learns of a sandbox by creating it.
//
// This package and critest are the only ones in phaseshift that import
// gRPC and k8s.io/cri-api, and they are a module of their own
// (github.com/phaseshift/phaseshift/source/cri): a daemon that imports
// them takes on those modules, at least at the versions this module's
// go.mod requires; one that does not keeps its own versions.
//
// # Testing
//
// Package [github.com/phaseshift/phaseshift/source/cri/critest] runs a fake
// CRI runtime in process, on a unix socket, for tests and demos. The
// end-to-end suite (examples/e2e) runs a Lister against a real containerd:
// its listing, the errors above for a missing, frozen, killed and wrong
// endpoint, and its first call after containerd is killed and restarted.
package cri
