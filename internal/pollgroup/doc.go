// Package pollgroup shares one completion queue among many connections:
// a poll group's members are queue pairs that complete into the group's
// CQ, whose events come on the group's one channel.
//
// Completions are handed to their member by queue pair number, into the
// member's inbox, in the order the CQ gave them. A member that steps polls
// the CQ itself, in the same crossing into C as its posts, so a spinning
// Read catches its reply without a wakeup in between; if another member is
// polling, it posts first and then waits for its turn to poll, so that no
// post's work in the kernel holds up the others' polls.
//
// Members that wait take turns at the channel (leader and followers): the
// first to wait, the leader, parks in the netpoller on the channel for the
// whole group and, when an event comes, polls the CQ and hands over what it
// found; the others park on their own wakeups until a completion is handed
// to them or the lead is passed to them. So a lone waiter is woken by the
// netpoller itself, and a group nobody waits on has no goroutine and takes
// no event: the CQ is armed only while a member waits.
//
// The group's CQ must never overflow, since an overflow fails every queue
// pair on it: each member reserves room for every completion its queue
// pair can have outstanding (its send and receive depths) and a group takes
// members only while the reservations fit.
//
// # Locks
//
// The order, outermost first (a lock is taken only while holding the ones
// before it, never after one below it):
//
//  1. the caller's connection lock (a member's Step runs under it);
//  2. Registry.mu, the process's groups per device;
//  3. Group.pollMu, the one lock of polling the CQ: every poll, every
//     hand-over of what a poll found, and the member map;
//  4. Group.mu, the accounts of membership (room reserved in the CQ and
//     the shared receive queue's claims);
//  5. Member.mu, a member's inbox; Group.lmu, the lead. Both are leaves:
//     nothing is taken or waited for under them.
//
// At the crossing into C a member's Step holds the caller's connection
// lock and, when it polls, pollMu; verbs.QP.Step takes no lock of its own
// for the crossing (see there; lists longer than one crossing carries are
// posted ahead with PostRecv and PostSend, which read-hold the QP's). A step that polls hands what it found to the other members
// before it lets go of pollMu: each hand-over takes that member's mu for a
// copy of one completion, and at most one poll's batch is handed over per
// step, so the caller's connection lock is held for a bounded time
// whatever the peers send. Handing them over after pollMu is released
// would let the next poll overtake them, and a member must receive its
// completions in CQ order. Under pollMu a member cut off for overrunning
// the shared receive queue runs its onCutOff (a disconnect).
//
// Every lock is released in the function that took it; collectPastLocked
// lets its caller's pollMu go between drains and takes it back before it
// returns.
package pollgroup
