module github.com/rnet-dev/rnet/examples

go 1.25.0

require github.com/rnet-dev/rnet v0.0.0-00010101000000-000000000000

require google.golang.org/grpc v1.70.0

// Development and CI build against the core module in this checkout; a
// release tags the core first and requires that tag here.
replace github.com/rnet-dev/rnet => ..

require (
	github.com/hashicorp/yamux v0.1.2
	github.com/rnet-dev/rnet/rnet/rnetgrpc v0.0.0-00010101000000-000000000000
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_golang v1.22.0
	github.com/prometheus/client_model v0.6.1 // indirect
	github.com/prometheus/common v0.62.0 // indirect
	github.com/prometheus/procfs v0.15.1 // indirect
)

require (
	github.com/rnet-dev/rnet/rnet/rnetprom v0.0.0-00010101000000-000000000000
	golang.org/x/net v0.35.0 // indirect
	golang.org/x/sys v0.30.0 // indirect
	golang.org/x/text v0.22.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20241202173237-19429a94021a // indirect
	google.golang.org/protobuf v1.36.5 // indirect
)

replace github.com/rnet-dev/rnet/rnet/rnetgrpc => ../rnet/rnetgrpc

replace github.com/rnet-dev/rnet/rnet/rnetprom => ../rnet/rnetprom
