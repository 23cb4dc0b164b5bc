module github.com/phaseshift/phaseshift/source/hostlocal

go 1.24.0

require (
	github.com/containernetworking/plugins v1.7.1
	github.com/phaseshift/phaseshift v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.10.0
	go.uber.org/goleak v1.1.11
	golang.org/x/sys v0.32.0
)

require (
	github.com/alexflint/go-filemutex v1.3.0 // indirect
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	go.uber.org/atomic v1.6.0 // indirect
	go.uber.org/multierr v1.5.0 // indirect
	go.uber.org/zap v1.15.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)

replace github.com/phaseshift/phaseshift => ../..
