module github.com/rnet-dev/rnet

go 1.25.0

require (
	golang.org/x/net v0.35.0
	golang.org/x/sys v0.30.0
)
