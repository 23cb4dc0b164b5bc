package main

import (
	"os"
	"strconv"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
)

// BenchmarkInProcessADD runs what one exec of this plugin runs after main
// (configuration, session, allocation, close), in this process, so that a
// CPU profile sees it without the exec around it:
//
//	go test -run '^$' -bench InProcess -cpuprofile cpu.out ./examples/hostlocal
func BenchmarkInProcessADD(b *testing.B) {
	for _, phase := range []string{"legacy", "expand", "migrate", "contract"} {
		b.Run("phase="+phase, func(b *testing.B) {
			n := benchNode(b, benchAllocs)
			n.warm(b, phase)
			conf := n.ipamConf(ps(phase))
			stdout := os.Stdout
			null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				b.Fatal(err)
			}
			os.Stdout = null
			defer func() { os.Stdout = stdout; null.Close() }()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				args := &skel.CmdArgs{ContainerID: "inproc" + strconv.Itoa(i), IfName: "eth0", StdinData: conf}
				if err := cmdAdd(args); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := cmdDel(args); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
