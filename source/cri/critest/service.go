package critest

import (
	"context"
	"maps"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The runtime's gRPC services: runtime.v1's Version, ListPodSandbox and
// PodSandboxStatus over a Runtime's sandboxes, and runtime.v1alpha2's
// Version, for the client's fallback.

// v1Service answers the CRI v1 RuntimeService. Embedding the Unimplemented
// server by value is what protoc-gen-go-grpc asks for: calls this fake does
// not serve answer Unimplemented.
type v1Service struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	r *Runtime
}

var errV1Unimplemented = status.Error(codes.Unimplemented, "unknown service runtime.v1.RuntimeService")

func (v *v1Service) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	r := v.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.v1Unimplemented {
		return nil, errV1Unimplemented
	}
	return &runtimeapi.VersionResponse{
		Version:           "0.1.0",
		RuntimeName:       r.name,
		RuntimeVersion:    r.version,
		RuntimeApiVersion: "v1",
	}, nil
}

func (v *v1Service) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	r := v.r
	r.mu.Lock()
	if r.v1Unimplemented {
		r.mu.Unlock()
		return nil, errV1Unimplemented
	}
	filter := req.GetFilter()
	if r.ignoreFilter {
		filter = nil
	}
	resp := &runtimeapi.ListPodSandboxResponse{}
	for _, id := range slices.Sorted(maps.Keys(r.sandboxes)) {
		s := r.sandboxes[id]
		if !matches(filter, s) {
			continue
		}
		resp.Items = append(resp.Items, &runtimeapi.PodSandbox{
			Id:             s.ID,
			Metadata:       metadata(s),
			State:          state(s),
			CreatedAt:      createdAt(s),
			Labels:         maps.Clone(s.Labels),
			Annotations:    maps.Clone(s.Annotations),
			RuntimeHandler: s.RuntimeHandler,
		})
		if r.vanish[id] {
			delete(r.sandboxes, id)
			delete(r.vanish, id)
		}
	}
	hook := r.listHook
	r.mu.Unlock()
	if hook != nil {
		hook(resp)
	}
	return resp, nil
}

func matches(f *runtimeapi.PodSandboxFilter, s *Sandbox) bool {
	if f.GetId() != "" && f.GetId() != s.ID {
		return false
	}
	if f.GetState() != nil && f.GetState().GetState() != state(s) {
		return false
	}
	for k, v := range f.GetLabelSelector() {
		if got, ok := s.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (v *v1Service) PodSandboxStatus(_ context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	r := v.r
	id := req.GetPodSandboxId()
	r.mu.Lock()
	if r.v1Unimplemented {
		r.mu.Unlock()
		return nil, errV1Unimplemented
	}
	if err := r.statusErrs[id]; err != nil {
		r.mu.Unlock()
		return nil, err
	}
	s, ok := r.sandboxes[id]
	if !ok {
		r.mu.Unlock()
		// containerd's wording.
		return nil, status.Errorf(codes.NotFound, "an error occurred when try to find sandbox %q: not found", id)
	}
	resp := &runtimeapi.PodSandboxStatusResponse{Status: sandboxStatus(s)}
	hook := r.statusHook
	r.mu.Unlock()
	if hook != nil {
		hook(id, resp)
	}
	return resp, nil
}

func sandboxStatus(s *Sandbox) *runtimeapi.PodSandboxStatus {
	st := &runtimeapi.PodSandboxStatus{
		Id:             s.ID,
		Metadata:       metadata(s),
		State:          state(s),
		CreatedAt:      createdAt(s),
		Network:        &runtimeapi.PodSandboxNetworkStatus{},
		Labels:         maps.Clone(s.Labels),
		Annotations:    maps.Clone(s.Annotations),
		RuntimeHandler: s.RuntimeHandler,
	}
	if len(s.IPs) > 0 {
		st.Network.Ip = s.IPs[0]
		for _, ip := range s.IPs[1:] {
			st.Network.AdditionalIps = append(st.Network.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
		}
	}
	mode := runtimeapi.NamespaceMode_POD
	if s.HostNetwork {
		mode = runtimeapi.NamespaceMode_NODE
	}
	st.Linux = &runtimeapi.LinuxPodSandboxStatus{
		Namespaces: &runtimeapi.Namespace{Options: &runtimeapi.NamespaceOption{Network: mode}},
	}
	return st
}

func metadata(s *Sandbox) *runtimeapi.PodSandboxMetadata {
	return &runtimeapi.PodSandboxMetadata{Name: s.Name, Uid: s.UID, Namespace: s.Namespace, Attempt: s.Attempt}
}

func state(s *Sandbox) runtimeapi.PodSandboxState {
	if s.NotReady {
		return runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	}
	return runtimeapi.PodSandboxState_SANDBOX_READY
}

func createdAt(s *Sandbox) int64 {
	if s.CreatedAt.IsZero() {
		return 0
	}
	return s.CreatedAt.UnixNano()
}

// v1alpha2Service answers Version on the CRI v1alpha2 service, whose
// Version messages are the same on the wire as v1's. Real runtimes up to
// containerd 1.7 serve both versions; clients ask v1alpha2 for the name of a
// runtime that refuses v1.
type v1alpha2Service struct{ r *Runtime }

type v1alpha2VersionServer interface {
	version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error)
}

func (v *v1alpha2Service) version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	r := v.r
	r.mu.Lock()
	defer r.mu.Unlock()
	return &runtimeapi.VersionResponse{
		Version:           "0.1.0",
		RuntimeName:       r.name,
		RuntimeVersion:    r.version,
		RuntimeApiVersion: "v1alpha2",
	}, nil
}

var v1alpha2VersionDesc = grpc.ServiceDesc{
	ServiceName: "runtime.v1alpha2.RuntimeService",
	HandlerType: (*v1alpha2VersionServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Version",
		Handler: func(srv any, ctx context.Context, dec func(any) error, intercept grpc.UnaryServerInterceptor) (any, error) {
			req := new(runtimeapi.VersionRequest)
			if err := dec(req); err != nil {
				return nil, err
			}
			call := func(ctx context.Context, req any) (any, error) {
				return srv.(v1alpha2VersionServer).version(ctx, req.(*runtimeapi.VersionRequest))
			}
			if intercept == nil {
				return call(ctx, req)
			}
			return intercept(ctx, req, &grpc.UnaryServerInfo{
				Server:     srv,
				FullMethod: "/runtime.v1alpha2.RuntimeService/Version",
			}, call)
		},
	}},
	Metadata: "api.proto",
}
