module github.com/rnet-dev/rnet/internal/twohosts

go 1.25.0

require github.com/rnet-dev/rnet v0.0.0-00010101000000-000000000000

require golang.org/x/sys v0.30.0 // indirect

// Development and CI build against the core module in this checkout.
replace github.com/rnet-dev/rnet => ../..
