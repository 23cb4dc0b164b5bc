package cri_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/phaseshift/phaseshift/source/cri"
	"github.com/phaseshift/phaseshift/source/cri/critest"
)

// An IPAM daemon restores its allocations from the runtime's pod
// sandboxes: one entry per pod IP, naming the sandbox that holds it. A real
// daemon dials unix:///run/containerd/containerd.sock; here a fake runtime
// stands in for containerd.
func ExampleReader() {
	runtime := critest.New()
	runtime.Add(
		critest.Sandbox{ID: "3f2a", Name: "web-0", Namespace: "shop", IPs: []string{"10.0.0.7", "fd00::7"}},
		critest.Sandbox{ID: "9b1c", Name: "db-0", Namespace: "shop", IPs: []string{"10.0.0.3"}},
		critest.Sandbox{ID: "c4d5", Name: "kube-proxy-x", Namespace: "kube-system", HostNetwork: true},
		critest.Sandbox{ID: "e6f7", Name: "old-web", Namespace: "shop", IPs: []string{"10.0.0.9"}, NotReady: true},
	)
	srv, err := runtime.Serve("")
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	lister, err := cri.NewLister(srv.Endpoint())
	if err != nil {
		log.Fatal(err)
	}
	defer lister.Close()

	type owner struct{ Sandbox, Pod string }
	legacy, err := cri.Reader(lister, func(sb cri.Sandbox) (netip.Addr, owner, bool) {
		if len(sb.IPs) == 0 {
			return netip.Addr{}, owner{}, false
		}
		return sb.IPs[0], owner{sb.ID, sb.Namespace + "/" + sb.Name}, true
	})
	if err != nil {
		log.Fatal(err)
	}

	allocations, err := legacy.List(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	ips := make([]netip.Addr, 0, len(allocations))
	for ip := range allocations {
		ips = append(ips, ip)
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	for _, ip := range ips {
		fmt.Println(ip, allocations[ip].Sandbox, allocations[ip].Pod)
	}
	// Output:
	// 10.0.0.3 9b1c shop/db-0
	// 10.0.0.7 3f2a shop/web-0
}

// A daemon may start before the container runtime: NewLister does not look
// at the socket, and each call looks again, so the Lister finds the runtime
// once it is up.
func ExampleNewLister() {
	dir, err := os.MkdirTemp("", "cri")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, "containerd.sock")

	lister, err := cri.NewLister("unix://"+socket, cri.WithTimeout(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer lister.Close()

	_, err = lister.Sandboxes(context.Background())
	fmt.Println("runtime not started yet:", errors.Is(err, cri.ErrSocketMissing))

	runtime := critest.New()
	runtime.SetVersion("containerd", "v1.7.13")
	srv, err := runtime.Serve(socket)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	info, err := lister.Runtime(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("found", info)
	// Output:
	// runtime not started yet: true
	// found containerd v1.7.13 (CRI v1)
}
