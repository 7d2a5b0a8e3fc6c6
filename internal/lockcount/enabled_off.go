//go:build !rnet_lockcount

package lockcount

// Enabled reports whether acquisitions are counted: built with the
// rnet_lockcount tag.
const Enabled = false
