module github.com/rnet-dev/rnet/internal/compat

go 1.25.0

require github.com/rnet-dev/rnet v0.0.0-00010101000000-000000000000

require (
	github.com/hashicorp/yamux v0.1.2
	golang.org/x/net v0.35.0
)

require golang.org/x/sys v0.30.0 // indirect

// Development and CI build against the core module in this checkout; a
// release tags the core first and requires that tag here.
replace github.com/rnet-dev/rnet => ../..
