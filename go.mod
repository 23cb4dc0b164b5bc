module github.com/phaseshift/phaseshift

go 1.24.0

require (
	github.com/stretchr/testify v1.7.1
	go.uber.org/goleak v1.1.11
	go.uber.org/zap v1.15.0
	golang.org/x/sys v0.1.0
	pgregory.net/rapid v1.1.0
)

require (
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	go.uber.org/atomic v1.6.0 // indirect
	go.uber.org/multierr v1.5.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
