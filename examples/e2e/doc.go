// Package e2e is phaseshift's end-to-end suite: it runs the examples and
// source/cri under a real container runtime, and holds nothing but its
// tests.
//
//	sudo go test ./examples/e2e -e2e -v
//
// It starts containerd (Debian 12's 1.6.20, with runc) with its CRI plugin
// on a socket in a temporary directory, with its own root, state, runc
// root and configuration; imports a pause image it builds (a static Go
// binary that sleeps until signalled, written as a docker-archive tarball
// and imported with ctr into the k8s.io namespace); and networks pods with
// the CNI bridge and loopback plugins of the plugins module the examples
// require, built from the module cache, with examples/hostlocal as
// bridge's IPAM plugin. Then, over CRI (RunPodSandbox, StopPodSandbox,
// RemovePodSandbox):
//
//   - TestPhaseWalk walks a node through the rollout 0 → 1 → 2 → 0 →
//     3 (refused) → 2 → host-local → 2 → 3 → 2 → 3 → 0 → 1, creating and
//     removing pods at every step, and after every step compares the pod
//     IPs containerd reports with host-local's files and the checkpoint,
//     each where the phase keeps it current;
//   - TestLister points source/cri at containerd: its listing leaves out
//     stopped and failed sandboxes; Runtime; the documented errors for a
//     missing socket, a frozen runtime (SIGSTOP: a timeout), a killed one
//     (connection refused, at once), and the ttrpc socket (not a CRI
//     endpoint); and the same Lister's first call after containerd is
//     killed with -9 and started again;
//   - TestIPAMRestore runs examples/ipam against containerd in phases 0, 1
//     and 2 and checks it restores every pod, and in phase 2 what it
//     backfills and keeps;
//   - TestPodChurnAcrossARestart makes examples/ipam (--serve) the pods'
//     IPAM through a relay plugin (this test binary, copied into the CNI
//     plugin directory, which passes each CNI call to the daemon over a
//     socket and can hold its answer once the daemon acknowledged it), and
//     restarts it from phase 1 into phase 2 with a CNI ADD whose sandbox
//     containerd does not list yet and a CNI DEL whose sandbox it still
//     lists (NOTREADY: source/cri leaves it out) both in flight; it checks
//     against containerd that every ready sandbox is served with its IP,
//     that no IP is served twice, and that the next ADD gets no live IP.
//     TestPodChurnAcrossTwoRestarts adds an ADD in flight across a phase-1
//     restart; it is skipped as a known failure (issue 41).
//
// # Running it
//
// The suite runs only with -e2e, as root, with containerd, its runc shim
// and runc on PATH (apt-get install -y containerd), and the go command to
// build the plugins and the image. Without any of these every test skips
// with one message that says which. .ci/run installs containerd and runs
// it. Runs on one machine take turns (a lock: a unix socket in the
// abstract namespace, which the kernel frees when a run dies). On the
// 2-core development VM, shared with other work, the suite takes about a
// minute with warm build caches (57 s at a load average of 4.5, 70 s at
// 13); building the CNI plugins from a cold cache adds up to two minutes. It fails past a
// 6-minute bound rather than hang a CI job on a hung containerd.
//
// # What containerd needs in this sandbox
//
// Found on the development VM (Linux 6.18, Debian 12, no systemd, cgroup
// v1 controllers with a v2 hierarchy beside them, ext4 root, root without
// CAP_SYS_RESOURCE) and assumed of the CI machine:
//
//   - root, for namespaces, mounts and cgroups;
//   - cgroups: runc's cgroupfs driver (SystemdCgroup = false) on the v1
//     controllers; pods go under the cgroup parent /phaseshift-e2e;
//   - the overlayfs snapshotter (overlay in /proc/filesystems, on ext4);
//     native is not needed;
//   - the bridge module: the bridge plugin makes a Linux bridge,
//     phaseshift-e2e0, and a veth pair per pod. It runs with isGateway
//     and ipMasq off, so no iptables is needed (none is installed there)
//     and no sysctl is changed;
//   - restrict_oom_score_adj = true: the CRI plugin gives a sandbox an
//     oom_score_adj of -998, and lowering it needs CAP_SYS_RESOURCE,
//     which root lacks there (runc fails "can't get final child's PID
//     from pipe" without it);
//   - the runtime v1 plugin may not be disabled (containerd 1.6's tasks
//     service, which CRI needs, requires one); the opt plugin is disabled
//     so that nothing is written to /opt/containerd;
//   - netns_mounts_under_state_dir, so that pod network namespaces are
//     mounted under the suite's directory and not in /var/run/netns;
//   - a host-network pod gets no hostname (runc refuses one without a
//     private UTS namespace), as the kubelet does.
//
// # Cleaning up
//
// Everything the suite makes is named with the prefix phaseshift-e2e, or
// lives in or goes with something that is: its directory in the temporary
// directory (containerd's root and state, the runc root, netns mounts, CNI
// files, logs), the bridge, the cgroup parent, and processes (containerd
// and its shims, by their command lines; pods, by their cgroup). The veth
// pairs the bridge plugin names go with the pods' network namespaces; the
// shims' sockets in /run/containerd/s are found through the task bundles
// in containerd's state directory. It removes all of it when it ends, and
// sweeps whatever a run that was killed left behind before it starts:
// kills the processes, unmounts what is mounted under its directories,
// deletes the bridge and the cgroups, removes the shims' sockets in
// /run/containerd/s, the results libcni cached in /var/lib/cni/results
// for the suite's pods (its network's, and containerd's loopback's for the
// same sandboxes; containerd 1.6 cannot move that directory) and the
// directories. containerd runs with a parent-death signal, so it dies with
// the test process; a SIGINT or SIGTERM to the test process, or to its
// process group with go test, cleans up before it exits.
//
// # Caveats
//
//   - It changes the machine it runs on while it runs (a bridge, cgroups,
//     mounts, processes): run it on a CI machine or a VM, not on a node.
//   - The sweep removes anything with its prefix, also what a user named so.
//   - It runs containerd's pods with the image it builds and never pulls.
package e2e
