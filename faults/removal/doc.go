// Package removal tests what happens to rnet connections when an RDMA device
// disappears under traffic (rdma link delete, which rdma_cm reports as
// DEVICE_REMOVAL). It destroys a lab device, so it lives apart from every
// other device test: the lab runs it after every other package.
package removal
