// Package testcni is the CNI IPAM key that the module's tests and
// benchmarks share: the CNI spec's primary key for IPAM state, "(network
// name, CNI_CONTAINERID, CNI_IFNAME)", with the placeholders the VPC CNI
// gives an entry it learned from CRI, which records neither the network nor
// the interface.
//
// # Caveats
//
//   - It is for tests: examples/ipam and source/hostlocal define their own
//     keys, as a user's daemon would.
package testcni

// Key is an IPAM key.
type Key struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

// The placeholders of an entry learned from CRI (the VPC CNI's names).
const (
	BackfillNetwork = "_migrated-from-cri"
	BackfillIfName  = "unknown"
	Network         = "aws-cni" // the network of Real keys
)

// ByContainer is the Match of an IPAM store: CRI knows only the sandbox, so
// keys with the same container ID are one entry.
func ByContainer(k Key) Key { return Key{ContainerID: k.ContainerID} }

// Real is the key a CNI ADD gives container id: the network and eth0.
func Real(id string) Key { return Key{Network: Network, ContainerID: id, IfName: "eth0"} }

// FromCRI is how an entry learned from CRI looks: placeholders for what
// CRI does not record.
func FromCRI(id string) Key {
	return Key{Network: BackfillNetwork, ContainerID: id, IfName: BackfillIfName}
}
