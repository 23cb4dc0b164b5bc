module github.com/phaseshift/phaseshift/examples

go 1.26.0

require (
	github.com/containernetworking/cni v1.3.0
	github.com/containernetworking/plugins v1.9.0
	github.com/phaseshift/phaseshift v0.0.0-00010101000000-000000000000
	github.com/phaseshift/phaseshift/metrics v0.0.0-00010101000000-000000000000
	github.com/phaseshift/phaseshift/source/cri v0.0.0-00010101000000-000000000000
	github.com/phaseshift/phaseshift/source/hostlocal v0.0.0-00010101000000-000000000000
	github.com/prometheus/client_golang v1.20.5
	github.com/stretchr/testify v1.10.0
	go.uber.org/zap v1.15.0
	golang.org/x/sys v0.48.0
	google.golang.org/grpc v1.83.2
	k8s.io/cri-api v0.34.0
)

require (
	github.com/alexflint/go-filemutex v1.3.0 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/davecgh/go-spew v1.1.2-0.20180830191138-d8f796af33cc // indirect
	github.com/klauspost/compress v1.20.2 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pmezard/go-difflib v1.0.1-0.20181226105442-5d4384ee4fb2 // indirect
	github.com/prometheus/client_model v0.6.1 // indirect
	github.com/prometheus/common v0.55.0 // indirect
	github.com/prometheus/procfs v0.15.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	go.uber.org/atomic v1.6.0 // indirect
	go.uber.org/goleak v1.1.11 // indirect
	go.uber.org/multierr v1.5.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260526163538-3dc84a4a5aaa // indirect
	google.golang.org/protobuf v1.36.11 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

replace (
	github.com/phaseshift/phaseshift => ../
	github.com/phaseshift/phaseshift/metrics => ../metrics
	github.com/phaseshift/phaseshift/source/cri => ../source/cri
	github.com/phaseshift/phaseshift/source/hostlocal => ../source/hostlocal
)
