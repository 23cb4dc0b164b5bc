// Package vpccni puts the AWS VPC CNI's IPAM datastore on phaseshift.
//
// ipamd's datastore (pkg/ipamd/datastore of
// github.com/aws/amazon-vpc-cni-k8s) keeps every allocation in memory and
// hands the whole of it to a datastore.Checkpointer at every change; the
// released ipamd makes one DataStore per network card
// (datastore.InitializeDataStores), each over a JSONFile of its own:
// /var/run/aws-node/ipam.json for card 0, ipam-nic-N.json for card N.
// Adopting phaseshift is one argument to datastore.NewDataStore there, per
// card: a Checkpointer from Open over that card's file, in the phase the
// DaemonSet's flag says, whose Store keeps the file (through their own
// JSONFile, so the released binary reads it) as an explicit legacy and
// phaseshift's checkpoint beside it:
//
//	checkpointer, err := vpccni.Open(ctx, vpccni.Config{Phase: phase, LegacyPath: dsBackingStorePath})
//	...
//	dsList = append(dsList, NewDataStore(log, checkpointer, enablePD, networkCard))
//
// A Checkpointer serves one card's DataStore; a second DataStore given the
// same one fails its ReadBackingStore (ErrShared).
//
// The tests drive their real DataStore through its public API across the
// rollout: phases 0 to 3, the released code between them (their JSONFile
// alone, the old binary), a kill -9 in the middle of an allocation, and
// migratetest's matrix over StoreConfig with the rule that no two
// allocations hold one address.
//
// # Module
//
// This is a module of its own, and not in the repository's go.work:
// github.com/aws/amazon-vpc-cni-k8s brings client-go, the AWS SDK and
// gRPC v1.83 with it, and requires Go 1.26.4. In go.work it would raise the
// workspace's go line to 1.26.4, and Go's version selection would build
// every other module's tests with the versions the AWS module requires
// (gRPC, cri-api, Prometheus, the CNI plugins) instead of the lowest ones
// those modules require and are tested at. So nothing else in the
// repository requires it, and .ci/run tests it on its own (GOWORK=off,
// and go mod tidy -diff like every module).
//
// An ipamd that imports this library takes the root module
// (github.com/phaseshift/phaseshift: zap and golang.org/x/sys) and nothing
// of gRPC or cri-api: its own pins stay. One that imports source/cri too (a
// CNI release still in the CRI era) ends up with at least what source/cri
// requires, the lowest with which it builds and passes its tests:
// google.golang.org/grpc v1.63.0 (grpc.NewClient) and k8s.io/cri-api
// v0.20.0 (the CRI v1 API), or its own where those are higher; with
// Kubernetes 1.30's pins (gRPC v1.58.3, cri-api v0.30.4), gRPC v1.63.0 and
// its own cri-api (internal/deps, TestCRIImporterEndsUpWith, checks both).
// This module, which does not import source/cri, has the AWS module's gRPC
// (v1.83.1, with v1.23.1 of it) and no cri-api.
//
// # Caveats
//
//   - Their JSONFile does not fsync the directory after its rename, so a
//     power cut can take back ipam.json's last write in phases 0 to 2 (the
//     released binary has the same gap); phaseshift's checkpoint is
//     durable.
//   - A restore that writes legacy back in line (a rollback from phase 3
//     to 2 heals ipam.json, rule 9 of package migrate) writes it once per
//     allocation it changes: Restore's repairs use Put and Delete.
//   - ipamd's ReadBackingStore drops allocations whose address is on no
//     ENI it knows, and allocations whose pod's host veth is gone; the
//     Checkpoint that follows removes them from the Store too.
//   - Checkpoint compares every allocation of the snapshot with the
//     Store's (Store.Replace, ==) at every write: cheap, but linear in the
//     node's allocations, as ipamd's own encoding of the snapshot is.
package vpccni
