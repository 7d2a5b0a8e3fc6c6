//go:build cgo

package verbs

import (
	"errors"
	"syscall"
	"testing"
)

// TestStepErrorNamesTheStage: each stage of rnet_step's failure return
// becomes an error naming the verb that failed, the device it failed on
// (the queue pair's for posts, the CQ's otherwise) and the errno.
func TestStepErrorNamesTheStage(t *testing.T) {
	for _, c := range []struct {
		stage  stepStage
		op     string
		device string
	}{
		{stagePostRecv, "ibv_post_recv", "qpdev"},
		{stagePostSend, "ibv_post_send", "qpdev"},
		{stagePostSRQRecv, "ibv_post_srq_recv", "qpdev"},
		{stageReqNotifyCQ, "ibv_req_notify_cq", "cqdev"},
		{stageGetCQEvent, "ibv_get_cq_event", "cqdev"},
	} {
		r := int64(c.stage)<<stageShift | int64(syscall.ENOMEM)<<8 | 3
		var e *Error
		if err := stepError(r, "qpdev", "cqdev"); !errors.As(err, &e) || e.Op != c.op || e.Device != c.device || e.Errno != syscall.ENOMEM {
			t.Errorf("stage %d: %v, want %s on %s failing with ENOMEM", c.stage, err, c.op, c.device)
		}
	}
	var e *Error
	if err := stepError(int64(stagePollCQ)<<stageShift|2<<8, "qpdev", "cqdev"); !errors.As(err, &e) || e.Op != "ibv_poll_cq" || e.Device != "cqdev" {
		t.Errorf("poll stage: %v, want ibv_poll_cq on cqdev", err)
	}
}
