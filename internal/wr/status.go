package wr

import "strconv"

// WCStatus is a work completion status (enum ibv_wc_status).
type WCStatus uint32

const (
	WCSuccess          WCStatus = 0
	WCLocLenErr        WCStatus = 1
	WCLocQPOpErr       WCStatus = 2
	WCLocEECOpErr      WCStatus = 3
	WCLocProtErr       WCStatus = 4
	WCWRFlushErr       WCStatus = 5
	WCMWBindErr        WCStatus = 6
	WCBadRespErr       WCStatus = 7
	WCLocAccessErr     WCStatus = 8
	WCRemInvReqErr     WCStatus = 9
	WCRemAccessErr     WCStatus = 10
	WCRemOpErr         WCStatus = 11
	WCRetryExcErr      WCStatus = 12
	WCRNRRetryExcErr   WCStatus = 13
	WCLocRDDViolErr    WCStatus = 14
	WCRemInvRdReqErr   WCStatus = 15
	WCRemAbortErr      WCStatus = 16
	WCInvEECNErr       WCStatus = 17
	WCInvEECStateErr   WCStatus = 18
	WCFatalErr         WCStatus = 19
	WCRespTimeoutErr   WCStatus = 20
	WCGeneralErr       WCStatus = 21
	WCTMErr            WCStatus = 22
	WCTMRndvIncomplete WCStatus = 23
)

// Our own table, so that names need no cgo crossing; internal/verbs checks
// it against ibv_wc_status_str.
var wcStatusNames = [...]struct{ name, desc string }{
	{"IBV_WC_SUCCESS", "success"},
	{"IBV_WC_LOC_LEN_ERR", "local length error"},
	{"IBV_WC_LOC_QP_OP_ERR", "local QP operation error"},
	{"IBV_WC_LOC_EEC_OP_ERR", "local EE context operation error"},
	{"IBV_WC_LOC_PROT_ERR", "local protection error"},
	{"IBV_WC_WR_FLUSH_ERR", "Work Request Flushed Error"},
	{"IBV_WC_MW_BIND_ERR", "memory management operation error"},
	{"IBV_WC_BAD_RESP_ERR", "bad response error"},
	{"IBV_WC_LOC_ACCESS_ERR", "local access error"},
	{"IBV_WC_REM_INV_REQ_ERR", "remote invalid request error"},
	{"IBV_WC_REM_ACCESS_ERR", "remote access error"},
	{"IBV_WC_REM_OP_ERR", "remote operation error"},
	{"IBV_WC_RETRY_EXC_ERR", "transport retry counter exceeded"},
	{"IBV_WC_RNR_RETRY_EXC_ERR", "RNR retry counter exceeded"},
	{"IBV_WC_LOC_RDD_VIOL_ERR", "local RDD violation error"},
	{"IBV_WC_REM_INV_RD_REQ_ERR", "remote invalid RD request"},
	{"IBV_WC_REM_ABORT_ERR", "aborted error"},
	{"IBV_WC_INV_EECN_ERR", "invalid EE context number"},
	{"IBV_WC_INV_EEC_STATE_ERR", "invalid EE context state"},
	{"IBV_WC_FATAL_ERR", "fatal error"},
	{"IBV_WC_RESP_TIMEOUT_ERR", "response timeout error"},
	{"IBV_WC_GENERAL_ERR", "general error"},
	{"IBV_WC_TM_ERR", "TM error"},
	{"IBV_WC_TM_RNDV_INCOMPLETE", "TM software rendezvous"},
}

// Name is the C enumerator, e.g. "IBV_WC_RETRY_EXC_ERR".
func (s WCStatus) Name() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s].name
	}
	return "IBV_WC_STATUS(" + strconv.FormatUint(uint64(s), 10) + ")"
}

// Description is the text ibv_wc_status_str gives.
func (s WCStatus) Description() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s].desc
	}
	return "unknown"
}

func (s WCStatus) String() string { return s.Name() }

// PeerSide reports whether the status means that the peer's side failed
// the transfer: it never acknowledged it (retries exhausted, no receive
// posted), or its adapter refused it. A peer whose process dies shows as
// any of these, depending on which of its resources its kernel tore down
// first; a hostile peer that advertised a bad buffer shows the same way.
func (s WCStatus) PeerSide() bool {
	switch s {
	case WCRemInvReqErr, WCRemAccessErr, WCRemOpErr, WCRetryExcErr, WCRNRRetryExcErr:
		return true
	}
	return false
}
