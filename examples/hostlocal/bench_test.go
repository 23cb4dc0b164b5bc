package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"

	"github.com/phaseshift/phaseshift/source/hostlocal"
)

// The benchmarks exec both binaries through libcni, as containerd and
// CRI-O do, on networks that already hold benchAllocs allocations, in
// b.TempDir() on the same disk, and report this plugin's time as a ratio
// to the real host-local doing the same ADD in the same run:
//
//   - x-host-local: wall time of one ADD, exec to exit (libcni's own work,
//     the same for both, included), this plugin over host-local;
//   - host-local-ms: host-local's ADD;
//   - start-ms ... exit-ms: where this plugin's time goes, from the
//     stages its exec records (envTrace): start (exec until main: the
//     kernel's exec, the Go runtime, package initialisation, skel), open
//     (the checkpoint's lock), lock (host-local's), restore, write (the
//     one commit), close, and exit (from close until libcni has the
//     result); restore-save-ms and write-save-ms are the checkpoint saves
//     within restore and write.
//
// Each iteration runs one ADD of this plugin and one of host-local, timed,
// each followed by its DEL, untimed. Run:
//
//	go test -run '^$' -bench . -benchtime 200x -count 6 ./examples/hostlocal | tee bench.txt
//	benchstat bench.txt

const benchAllocs = 1000

// benchNode is a node whose network holds n allocations in host-local's
// files, with a /16 range so that ADDs never run out.
func benchNode(b *testing.B, n int) *node {
	b.Helper()
	nd := newNode(b)
	nd.ranges = `[[{"subnet": "10.22.0.0/16"}]]`
	st, err := disk.New(testNetwork, nd.dataDir)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	for i := range n {
		ip := netip.AddrFrom4([4]byte{10, 22, byte((i + 2) >> 8), byte(i + 2)})
		if ok, err := st.Reserve(fmt.Sprintf("base%06d", i), "eth0", ip.AsSlice(), "0"); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	return nd
}

// warm brings a node to phase: a phase-2 ADD and DEL write the
// checkpoint from host-local's files (phase 3 needs it), then one in the
// phase itself settles what its first restore changes.
func (n *node) warm(b *testing.B, phase string) {
	b.Helper()
	for _, p := range []string{"migrate", phase} {
		if _, err := n.add(ps(p), "warm"); err != nil {
			b.Fatal(err)
		}
		if err := n.del(ps(p), "warm"); err != nil {
			b.Fatal(err)
		}
	}
}

// release undoes a burst of ADDs, untimed, more cheaply than a DEL each:
// this plugin's GC keeps the network's first allocations (one exec), and
// host-local's files of the burst are removed as its DEL would.
func (n *node) release(b *testing.B, r runner, ids []string) {
	b.Helper()
	ctx := ctxFor(b)
	if r == hl {
		src, err := hostlocal.Open(n.dataDir, testNetwork)
		if err != nil {
			b.Fatal(err)
		}
		defer src.Close()
		for _, id := range ids {
			if err := src.Delete(ctx, key{Network: testNetwork, ContainerID: id, IfName: "eth0"}); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	valid := make([]types.GCAttachment, benchAllocs)
	for i := range valid {
		valid[i] = types.GCAttachment{ContainerID: fmt.Sprintf("base%06d", i), IfName: "eth0"}
	}
	var conf map[string]any
	if err := json.Unmarshal(n.ipamConf(r), &conf); err != nil {
		b.Fatal(err)
	}
	conf["cni.dev/valid-attachments"] = valid
	stdin, err := json.Marshal(conf)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := n.execRaw("GC", "", stdin); err != nil {
		b.Fatal(err)
	}
}

// stages is where an exec's time went, summed over execs.
type stages struct {
	sum map[string]time.Duration
	n   int
}

var stageNames = []string{"start", "open", "lock", "restore", "restore-save", "write", "write-save", "close", "exit"}

// add adds one ADD's stages: from before the exec (t0) through its trace
// marks to after libcni returned (t1), and the checkpoint saves within
// restore and write.
func (s *stages) add(t0, t1 time.Time, tr tracer) {
	marks := tr.Marks
	if s.sum == nil {
		s.sum = map[string]time.Duration{}
	}
	prev := t0
	for _, m := range marks {
		at := time.Unix(0, m.At)
		name := m.Stage
		if name == "main" {
			name = "start"
		}
		s.sum[name] += at.Sub(prev)
		prev = at
	}
	s.sum["exit"] += t1.Sub(prev)
	s.sum["restore-save"] += tr.RestoreSave
	s.sum["write-save"] += tr.WriteSave
	s.n++
}

func (s *stages) report(b *testing.B) {
	if s.n == 0 {
		return
	}
	for _, name := range stageNames {
		if d, ok := s.sum[name]; ok {
			b.ReportMetric(float64(d)/float64(s.n)/1e6, name+"-ms")
		}
	}
}

// readTrace returns the ADD lines of a trace file, in order.
func readTrace(b *testing.B, path string) []tracer {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var out []tracer
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var t tracer
		if err := json.Unmarshal(sc.Bytes(), &t); err != nil {
			b.Fatal(err)
		}
		if t.Cmd == "ADD" {
			out = append(out, t)
		}
	}
	return out
}

func BenchmarkExecADD(b *testing.B) {
	for _, phase := range []string{"legacy", "expand", "migrate", "contract"} {
		b.Run("phase="+phase, func(b *testing.B) {
			ours, ref := benchNode(b, benchAllocs), benchNode(b, benchAllocs)
			ours.warm(b, phase)
			trace := filepath.Join(b.TempDir(), "trace")
			b.Setenv(envTrace, trace)
			var t0s, t1s []time.Time
			var oursTotal, refTotal time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id := "bench" + strconv.Itoa(i)
				t0 := time.Now()
				if _, err := ours.add(ps(phase), id); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				b.StopTimer()
				oursTotal += t1.Sub(t0)
				t0s, t1s = append(t0s, t0), append(t1s, t1)
				if err := ours.del(ps(phase), id); err != nil {
					b.Fatal(err)
				}
				r0 := time.Now()
				if _, err := ref.add(hl, id); err != nil {
					b.Fatal(err)
				}
				refTotal += time.Since(r0)
				if err := ref.del(hl, id); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			var st stages
			for i, t := range readTrace(b, trace) {
				st.add(t0s[i], t1s[i], t)
			}
			b.ReportMetric(float64(oursTotal)/float64(refTotal), "x-host-local")
			b.ReportMetric(float64(refTotal)/float64(b.N)/1e6, "host-local-ms")
			st.report(b)
		})
	}
}

// BenchmarkExecADD32 is a burst of 32 ADDs at once, as when a node starts
// many pods: per op, 32 concurrent ADDs of this plugin (timed) and of
// host-local (the reference), each on its own network of benchAllocs
// allocations.
func BenchmarkExecADD32(b *testing.B) {
	const burst = 32
	for _, phase := range []string{"legacy", "expand", "migrate", "contract"} {
		b.Run("phase="+phase, func(b *testing.B) {
			ours, ref := benchNode(b, benchAllocs), benchNode(b, benchAllocs)
			ours.warm(b, phase)
			var refTotal time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ids := make([]string, burst)
				for j := range ids {
					ids[j] = fmt.Sprintf("bench%d-%d", i, j)
				}
				ours.addMany(func(int) runner { return ps(phase) }, ids)
				b.StopTimer()
				ours.release(b, ps(phase), ids)
				r0 := time.Now()
				ref.addMany(func(int) runner { return hl }, ids)
				refTotal += time.Since(r0)
				ref.release(b, hl, ids)
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed())/float64(refTotal), "x-host-local")
			b.ReportMetric(float64(refTotal)/float64(b.N)/1e6, "host-local-ms")
			b.ReportMetric(float64(b.Elapsed())/float64(b.N*burst)/1e6, "ms/add")
		})
	}
}
