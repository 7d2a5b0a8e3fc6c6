//go:build !linux || !cgo

package verbs

import (
	"context"
	"time"
	"unsafe"

	"github.com/rnet-dev/rnet/internal/wr"
)

// Without Linux and cgo there is no RDMA: every constructor fails with
// ErrNotSupported, so no value of these types is ever live and their
// methods only report the same error.

type Context struct{}
type PD struct{}
type MR struct{}
type CompChannel struct{}
type CQ struct{}
type QP struct{}

func unsupported(op string) error { return &Error{Op: op, Err: ErrNotSupported} }

func Devices() ([]DeviceInfo, error)                 { return nil, unsupported("ibv_get_device_list") }
func DeviceListed(name string) (bool, error)         { return false, unsupported("ibv_get_device_list") }
func Open(name string) (*Context, error)             { return nil, unsupported("ibv_open_device") }
func WrapContext(p unsafe.Pointer) (*Context, error) { return nil, unsupported("WrapContext") }

func (ctx *Context) Name() string               { return "" }
func (ctx *Context) Ptr() unsafe.Pointer        { return nil }
func (ctx *Context) Close() error               { return nil }
func (ctx *Context) Query() (DeviceInfo, error) { return DeviceInfo{}, unsupported("ibv_query_device") }
func (ctx *Context) AllocPD() (*PD, error)      { return nil, unsupported("ibv_alloc_pd") }
func (ctx *Context) NewCompChannel() (*CompChannel, error) {
	return nil, unsupported("ibv_create_comp_channel")
}
func (ctx *Context) NewCQ(cqe int, ch *CompChannel) (*CQ, error) {
	return nil, unsupported("ibv_create_cq")
}
func (ctx *Context) NewSplitCQ(cqe int, ch *CompChannel) (*CQ, error) {
	return nil, unsupported("ibv_create_cq")
}
func (cq *CQ) Send() *CQ { return cq }

func (pd *PD) Context() *Context                               { return nil }
func (pd *PD) Ptr() unsafe.Pointer                             { return nil }
func (pd *PD) Close() error                                    { return nil }
func (pd *PD) RegisterMR(size int, access Access) (*MR, error) { return nil, unsupported("ibv_reg_mr") }

func (mr *MR) Bytes() []byte     { return nil }
func (mr *MR) Addr() uint64      { return 0 }
func (mr *MR) Len() int          { return 0 }
func (mr *MR) LKey() uint32      { return 0 }
func (mr *MR) RKey() uint32      { return 0 }
func (mr *MR) Access() Access    { return 0 }
func (mr *MR) Close() error      { return nil }
func (mr *MR) Deregister() error { return nil }

func (ch *CompChannel) Wait(ctx context.Context) (*CQ, error) {
	return nil, unsupported("ibv_get_cq_event")
}
func (ch *CompChannel) WaitReady(ctx context.Context) (parked bool, err error) {
	return false, unsupported("wait for completion channel")
}
func (ch *CompChannel) SetDeadline(t time.Time) error { return unsupported("SetDeadline") }
func (ch *CompChannel) Close() error                  { return nil }

func (cq *CQ) Size() int                             { return 0 }
func (cq *CQ) Ptr() unsafe.Pointer                   { return nil }
func (cq *CQ) Poll(out []wr.Completion) (int, error) { return 0, unsupported("ibv_poll_cq") }
func (cq *CQ) ReqNotify(solicitedOnly bool) error    { return unsupported("ibv_req_notify_cq") }
func (cq *CQ) Close() error                          { return nil }
func (cq *CQ) Step(flags StepFlags, out []wr.Completion, tries int) (int, error) {
	return 0, unsupported("ibv_poll_cq")
}

func WrapQP(p unsafe.Pointer, caps QPCaps, destroy func() error) *QP { return &QP{} }
func WrapQPOnSRQ(p unsafe.Pointer, caps QPCaps, srq *SRQ, destroy func() error) *QP {
	return &QP{}
}
func (qp *QP) SRQ() *SRQ { return nil }

func (qp *QP) Num() uint32                         { return 0 }
func (qp *QP) Caps() QPCaps                        { return QPCaps{} }
func (qp *QP) Ptr() unsafe.Pointer                 { return nil }
func (qp *QP) State() (QPState, error)             { return QPUnknown, unsupported("ibv_query_qp") }
func (qp *QP) Attrs() (QPAttrs, error)             { return QPAttrs{}, unsupported("ibv_query_qp") }
func (qp *QP) Path() (QPPath, error)               { return QPPath{}, unsupported("ibv_query_qp") }
func (qp *QP) SetError() error                     { return unsupported("ibv_modify_qp") }
func (qp *QP) Close() error                        { return nil }
func (qp *QP) PostSend(wrs []wr.Send) (int, error) { return 0, unsupported("ibv_post_send") }
func (qp *QP) PostRecv(wrs []wr.Recv) (int, error) { return 0, unsupported("ibv_post_recv") }
func (qp *QP) Step(cq *CQ, flags StepFlags, recvs []wr.Recv, sends []wr.Send, out []wr.Completion, tries int) (int, error) {
	return 0, unsupported("ibv_post_send")
}

type SRQ struct{}

func (pd *PD) NewSRQ(caps SRQCaps) (*SRQ, error)   { return nil, unsupported("ibv_create_srq") }
func (s *SRQ) Caps() SRQCaps                       { return SRQCaps{} }
func (s *SRQ) Device() string                      { return "" }
func (s *SRQ) Ptr() unsafe.Pointer                 { return nil }
func (s *SRQ) PostRecv(wrs []wr.Recv) (int, error) { return 0, unsupported("ibv_post_srq_recv") }
func (s *SRQ) SetLimit(limit uint32) error         { return unsupported("ibv_modify_srq") }
func (s *SRQ) Limit() (uint32, error)              { return 0, unsupported("ibv_query_srq") }
func (s *SRQ) Close() error                        { return nil }
func (ctx *Context) NextAsyncEvent(timeout time.Duration) (AsyncEvent, error) {
	return AsyncEvent{}, unsupported("ibv_get_async_event")
}
func (e AsyncEvent) IsFor(srq *SRQ) bool { return false }
