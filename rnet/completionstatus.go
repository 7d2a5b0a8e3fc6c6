package rnet

import "github.com/rnet-dev/rnet/internal/wr"

// CompletionStatus is the status a device gives a work completion, enum
// ibv_wc_status of libibverbs; the constants carry its values.
type CompletionStatus uint32

// The completion statuses. A peer that died or became unreachable shows
// as WCRetryExcErr (or WCRNRRetryExcErr); one whose adapter refused a
// transfer, as a dead process's does, as WCRemAccessErr, WCRemOpErr or
// WCRemInvReqErr. WCWRFlushErr marks requests flushed after an earlier
// failure.
const (
	WCSuccess          = CompletionStatus(wr.WCSuccess)
	WCLocLenErr        = CompletionStatus(wr.WCLocLenErr)
	WCLocQPOpErr       = CompletionStatus(wr.WCLocQPOpErr)
	WCLocEECOpErr      = CompletionStatus(wr.WCLocEECOpErr)
	WCLocProtErr       = CompletionStatus(wr.WCLocProtErr)
	WCWRFlushErr       = CompletionStatus(wr.WCWRFlushErr)
	WCMWBindErr        = CompletionStatus(wr.WCMWBindErr)
	WCBadRespErr       = CompletionStatus(wr.WCBadRespErr)
	WCLocAccessErr     = CompletionStatus(wr.WCLocAccessErr)
	WCRemInvReqErr     = CompletionStatus(wr.WCRemInvReqErr)
	WCRemAccessErr     = CompletionStatus(wr.WCRemAccessErr)
	WCRemOpErr         = CompletionStatus(wr.WCRemOpErr)
	WCRetryExcErr      = CompletionStatus(wr.WCRetryExcErr)
	WCRNRRetryExcErr   = CompletionStatus(wr.WCRNRRetryExcErr)
	WCLocRDDViolErr    = CompletionStatus(wr.WCLocRDDViolErr)
	WCRemInvRdReqErr   = CompletionStatus(wr.WCRemInvRdReqErr)
	WCRemAbortErr      = CompletionStatus(wr.WCRemAbortErr)
	WCInvEECNErr       = CompletionStatus(wr.WCInvEECNErr)
	WCInvEECStateErr   = CompletionStatus(wr.WCInvEECStateErr)
	WCFatalErr         = CompletionStatus(wr.WCFatalErr)
	WCRespTimeoutErr   = CompletionStatus(wr.WCRespTimeoutErr)
	WCGeneralErr       = CompletionStatus(wr.WCGeneralErr)
	WCTMErr            = CompletionStatus(wr.WCTMErr)
	WCTMRndvIncomplete = CompletionStatus(wr.WCTMRndvIncomplete)
)

// Name is the C enumerator, e.g. "IBV_WC_RETRY_EXC_ERR".
func (s CompletionStatus) Name() string { return wr.WCStatus(s).Name() }

// Description is the text ibv_wc_status_str gives, e.g. "transport retry
// counter exceeded".
func (s CompletionStatus) Description() string { return wr.WCStatus(s).Description() }

// PeerSide reports whether the status blames the peer's side: it never
// acknowledged the transfer, or its adapter refused it.
func (s CompletionStatus) PeerSide() bool { return wr.WCStatus(s).PeerSide() }

func (s CompletionStatus) String() string { return s.Name() }
