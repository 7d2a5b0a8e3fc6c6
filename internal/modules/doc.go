// Package modules holds no code: its test checks that every Go module in
// the repository states the same go line and requires the same
// golang.org/x/sys as the core, so that a nested module cannot quietly
// demand a newer toolchain than the one users of the core need.
package modules
