package pollgroup

import (
	"sync/atomic"

	"github.com/rnet-dev/rnet/internal/lockcount"

	"github.com/rnet-dev/rnet/internal/verbs"
	"github.com/rnet-dev/rnet/internal/wr"
)

// The state of groups and members, and which lock guards what. The lock
// order is in the package doc.

// Group is one shared CQ and the members whose queue pairs complete into
// it.
type Group struct {
	cq CQ
	// deviceCQ is the verbs CQ behind cq on a device, which the members'
	// queue pairs poll in their steps, and deviceSRQ the verbs SRQ behind
	// srq; nil otherwise.
	deviceCQ  *verbs.CQ
	deviceSRQ *verbs.SRQ

	// pollMu is held while the CQ is polled and what the poll found is
	// handed out, so that each member receives its completions in CQ
	// order; the fields below it up to lmu are guarded by it.
	pollMu lockcount.Mutex
	buf    []wr.Completion // the poll's buffer
	err    error           // the CQ failed: every member fails with it
	// failed is err != nil, for a step to read without pollMu: one that
	// finds the lock held posts nothing on a failed group.
	failed atomic.Bool
	// armed says the CQ was armed and every event since was taken by a
	// crossing that armed it again, or is still on the channel: a
	// completion not yet polled then wakes the leader.
	armed bool
	// sendArmed says the same of the CQ's send half (a split CQ, see
	// verbs.NewSplitCQ; on a CQ that is not split, of the CQ again). It is
	// armed only while wantSends members need the completions of their
	// sends to go on (see Member.NeedSends): the completions of sends that
	// nobody waits for then wake nobody, and the next step polls them.
	sendArmed bool
	wantSends int
	// polled counts the completions polled, and emptied the polls that
	// found fewer than a full batch (the CQ was then empty), so that a
	// caller can tell when everything in the CQ at some moment has been
	// handed out (see cqMark).
	polled  uint64
	emptied uint64
	members map[uint32]*Member // by queue pair number
	// stepper is the member whose own goroutine is polling (in its Step,
	// or leading), if any: what it polls for itself is not a hand-over
	// (see Member.Dispatches).
	stepper *Member
	strays  uint64 // completions for no member (a queue pair already gone)

	// spinner is the member whose caller busy-polls the CQ for the whole
	// group, if any (see TrySpin); atomic, taken by compare-and-swap.
	spinner atomic.Pointer[Member]

	// lmu guards the lead: the member waiting on the channel for the
	// group, and the followers waiting for it to hand over, oldest first.
	lmu       lockcount.Mutex
	leader    *Member
	followers waitList

	// mu guards the accounts of membership: reserved, joined, closed and
	// the shared receive queue's claims.
	mu       lockcount.Mutex
	reserved int  // CQ entries the members (and joiners) reserved
	joined   int  // members and joiners
	closed   bool // the last member left: no one may join

	// srq, if not nil, is the group's shared receive queue (see srq.go),
	// set before the group has members. sharesRecvs says the group takes
	// members that may share one: it has an SRQ unless the device refused
	// it.
	srq         *groupSRQ
	sharesRecvs bool
}

// Member is one queue pair's place in a poll group: the completions
// handed to it and the wakeup of its waiter. Its Step, Wait and Kick are
// the completion half of a connection's queue pair.
type Member struct {
	g         *Group
	reg       *Registry // the registry the group is in, if any
	depth     int       // completions the queue pair may have outstanding
	cqEntries int       // of them, reserved in the CQ by the member

	// qp is the queue pair Step posts on; set by Attach, before any Step.
	qp QP
	// Set by Attach and read by leave, under the group's pollMu: the
	// queue pair's number, whether it has one, and what cuts it off when
	// its peer overruns the shared receive queue. leaving says leave
	// destroyed the queue pair and hands out what it left in the CQ,
	// which is everything there at leftAt.
	qpNum    uint32
	attached bool
	onCutOff func()
	leaving  bool
	leftAt   cqMark
	// needSends says m counts in the group's wantSends, and gone that m
	// has left and never counts again; both under pollMu.
	needSends bool
	gone      bool
	// spinWoke says a spinning Step of m woke another member's waiter
	// since SpinWokeOthers last looked.
	spinWoke atomic.Bool

	// With a shared receive queue: the receives m claimed (under the
	// group's mu), and the ones its engine posted and its queue pair has
	// not consumed.
	recvClaim int
	recvOut   atomic.Int64

	// mu guards the inbox (a ring that grows up to depth entries: the
	// queue pair never has more completions outstanding) and the fields
	// after it up to wake.
	mu      lockcount.Mutex
	inbox   []wr.Completion
	head, n int
	kicked  bool
	stopped bool
	cut     bool // cutOff ran
	err     error
	// waking says the inbox holds a completion the waiter needs (see
	// deliver), and sendsWake that the completions of sends are such
	// (m needs them: see Member.NeedSends).
	waking    bool
	sendsWake bool
	// dispatches counts the wakeups of m's waiter by completions another
	// goroutine polled (see Dispatches).
	dispatches uint64
	wake       chan struct{} // one pending wakeup for Wait

	// The followers' list links, guarded by the group's lmu.
	prev, next *Member
	listed     bool
}

// groupSRQ is a poll group's shared receive queue and its accounts.
type groupSRQ struct {
	rq RQ
	// claimable and claimed count receives members may claim and have
	// claimed; guarded by the group's mu.
	claimable int
	claimed   int
	// balance is how many receives the queue holds beyond what the
	// members have outstanding: positive after a member left with
	// receives unconsumed (the next posts take them over instead of
	// posting), negative after a peer took receives it had no claim to
	// (the group posts them back).
	balance atomic.Int64
	// overruns counts messages that took a receive their connection had
	// no claim to.
	overruns atomic.Uint64
}

// cqMark is a moment in the CQ's history: see passedLocked.
type cqMark struct{ polled, emptied uint64 }

// waitList is a list of members, linked through them, so that joining and
// leaving it never allocates. Guarded by the group's lmu.
type waitList struct{ head, tail *Member }

// Registry finds a connection a poll group with room for its completions,
// making one when none has room, and forgets groups whose last member
// left.
type Registry struct {
	mu       lockcount.Mutex
	byDevice map[uintptr][]*Group // by struct ibv_context *
}
