package ring

// Autocorking (Config.Autocork), as TCP and SMC-R do it: while a DATA
// transfer of this connection is in flight, small writes wait in sbuf and
// go out together, as one transfer, when it completes. A DATA message may
// carry any number of bytes the peer's credits and granted buffer allow, so
// the peer cannot tell a coalesced write from a large one.

// Uncork makes the next PostSends post every unsent byte that credits
// allow, corked or not. The driver calls it when a goroutine is about to
// wait (for a reply, for room, for a deadline), so that nobody ever waits
// on bytes held back here.
func (e *Engine) Uncork() { e.uncork = true }

// Corked reports that written bytes are being held back for the in-flight
// transfers to complete. Blocked covers them too: the driver must keep
// polling until that completion has let them go.
func (e *Engine) Corked() bool { return e.sPosted != e.sHead && e.corkHolds() }

// corkHolds reports whether postData should hold back the unsent bytes
// [sPosted, sHead) for now. It never holds while nothing is in flight (the
// completion that releases them would never come), nor once they fill a
// transfer, the current target entry or half the ring, nor while the
// writer is held back, a close waits behind them or the driver asked for
// a flush: each of those must not wait for a completion.
func (e *Engine) corkHolds() bool {
	if !e.cfg.Autocork || e.uncork || e.sPosted == e.sDone || e.sBacklog ||
		e.closePending != closeNone || e.writeClosed || e.sendResize.has {
		return false
	}
	unsent := e.sHead - e.sPosted
	limit := min(uint64(MaxTransfer), uint64(e.tgt[e.tgtIdx].Length), uint64(len(e.sbuf)/2))
	return unsent < limit
}

// noteWrite counts a Write of n bytes (n > 0) that lands behind unsent
// bytes of an earlier one: the two go out in one transfer unless a
// transfer happens to end exactly between them.
func (e *Engine) noteWrite() {
	if e.sHead != e.sPosted {
		e.stats.CoalescedWrites++
	}
}
