module github.com/rnet-dev/rnet/internal/twohosts

go 1.25.0

require (
	github.com/rnet-dev/rnet v0.0.0-00010101000000-000000000000
	github.com/rnet-dev/rnet/rnet/rnetgrpc v0.0.0-00010101000000-000000000000
	golang.org/x/net v0.35.0
	google.golang.org/grpc v1.70.0
)

require (
	golang.org/x/sys v0.30.0 // indirect
	golang.org/x/text v0.22.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20241202173237-19429a94021a // indirect
	google.golang.org/protobuf v1.35.2 // indirect
)

// Development and CI build against the core module in this checkout.
replace github.com/rnet-dev/rnet => ../..

replace github.com/rnet-dev/rnet/rnet/rnetgrpc => ../../rnet/rnetgrpc
