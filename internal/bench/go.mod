module github.com/phaseshift/phaseshift/internal/bench

go 1.24.0

require (
	github.com/phaseshift/phaseshift v0.0.0
	go.etcd.io/bbolt v1.4.3
)

require (
	go.uber.org/atomic v1.6.0 // indirect
	go.uber.org/multierr v1.5.0 // indirect
	go.uber.org/zap v1.15.0 // indirect
	golang.org/x/sys v0.32.0 // indirect
)

replace github.com/phaseshift/phaseshift => ../..
