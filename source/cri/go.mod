module github.com/phaseshift/phaseshift/source/cri

go 1.24.0

require (
	github.com/phaseshift/phaseshift v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.10.0
	go.uber.org/goleak v1.1.11
	go.uber.org/zap v1.15.0
	google.golang.org/grpc v1.72.1
	google.golang.org/protobuf v1.36.5
	k8s.io/cri-api v0.34.0
)

require (
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	go.uber.org/atomic v1.6.0 // indirect
	go.uber.org/multierr v1.5.0 // indirect
	golang.org/x/net v0.38.0 // indirect
	golang.org/x/sys v0.32.0 // indirect
	golang.org/x/text v0.23.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250303144028-a0af3efb3deb // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

replace github.com/phaseshift/phaseshift => ../..
