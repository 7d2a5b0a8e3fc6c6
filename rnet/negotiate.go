package rnet

import (
	"errors"
	"math"
	"net"
	"net/netip"
	"time"

	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/stream"
)

// Negotiating the resume extension at connect (docs/design.md, "Resuming a
// connection on another path"). Only the agreement is built so far: a
// connection that agreed keeps its sent bytes until the peer has them and
// holds a token, but nothing resumes it yet, and a resume request is
// refused. settings.resume is the switch; it is off unless a test sets it,
// so that C rsocket peers and older rnet peers see the bytes they always
// did.

// resumeAgreement is what a dialer keeps of a listener's agreement to
// resume its connection: the token to present, how long the listener waits
// for it once the path fails, and the listener's other addresses.
type resumeAgreement struct {
	token    resume.Token
	lifetime time.Duration
	addrs    []netip.AddrPort
}

// errResumeRefused is what a listener tells its HandshakeError hook when it
// refuses a request that resumes a connection: it resumes none yet, so every
// token is refused alike, before anything is set up for the request.
var errResumeRefused = errors.New("rnet: resume request refused: this listener does not resume connections")

// dialRingConfig is the ring configuration a dialer's engine is built with:
// one that offers the extension keeps sent bytes until the peer has them
// (and so advertises a fixed credit window) from the start, since its
// request already carries that window; if the listener declines,
// acceptReply stops the retention before the connection starts.
func dialRingConfig(set settings) ring.Config {
	if !set.resume {
		return set.ring
	}
	cfg := set.ring
	cfg.RetainUntilReceived = true
	return cfg.Normalize()
}

// requestData is the connection request's private data: the engine's conn
// data (connData), with the offer appended when the switch is on.
func requestData(connData []byte, set settings) ([]byte, error) {
	if !set.resume {
		return connData, nil
	}
	return resume.EncodeRequest(connData, resume.Request{Kind: resume.Offer, Version: resume.Version})
}

// readReply reads the listener's agreement from its reply, if the dialer
// offered the extension: nil for a reply without it (a C listener, an rnet
// listener from before the extension, or one that declined), a protocol
// error naming the field for a broken one. A reply with the extension to a
// request without it is ignored: the dialer never asked.
func readReply(privateData []byte, offered bool) (*resumeAgreement, error) {
	if !offered {
		return nil, nil
	}
	r, ok, err := resume.ParseReply(privateData)
	if err != nil || !ok {
		return nil, err
	}
	return &resumeAgreement{token: r.Token, lifetime: r.Lifetime, addrs: r.Addrs}, nil
}

// acceptReply reads the listener's reply to a request that offered the
// extension if offered, then establishes eng with it. A dialer that offered
// retains from the start; if the listener declined, eng stops retaining
// before Establish, so that it takes a listener whose credit window grows
// (an rnet listener on a shared receive queue) and pays nothing for a
// connection that can never resume.
func acceptReply(eng *ring.Engine, privateData []byte, offered bool) (*resumeAgreement, error) {
	agreed, err := readReply(privateData, offered)
	if err != nil {
		return nil, err
	}
	if agreed == nil && eng.Config().RetainUntilReceived {
		if err := eng.StopRetaining(); err != nil {
			return nil, err
		}
	}
	if err := eng.Establish(privateData); err != nil {
		return nil, err
	}
	return agreed, nil
}

// resumeListener is a listener's side of the extension: the table of the
// connections it can resume, by token, and the addresses it names in its
// replies. A nil *resumeListener is a listener with the switch off.
type resumeListener struct {
	table *resume.Table[*resumeEntry]
	// addrs are the listener's addresses, other than loopback ones, that a
	// reply may name: every local address for a wildcard listener, none
	// for a listener on one address. Set once before the first request.
	addrs []netip.AddrPort
}

// resumeEntry is one connection in a listener's table; its pointer is the
// table's key.
type resumeEntry struct {
	remote net.Addr // the dialer, for logs
}

// resumeGrant is a listener's agreement to resume one connection: its
// entry in the table and the token for the reply.
type resumeGrant struct {
	entry *resumeEntry
	token resume.Token
}

// Bounds on the connections a listener's table keeps: as many as its
// locked-memory limit leaves room for at their idle size, but at least
// minResumeEntries and at most maxResumeEntries.
const (
	minResumeEntries = 16
	maxResumeEntries = 1 << 16
)

// resumeTableEntries is TableConfig.MaxEntries for a listener whose
// locked-memory limit (RLIMIT_MEMLOCK's soft limit, math.MaxUint64 for
// none) is memlock and whose connections are laid out as l: no more
// connections than that limit could hold, each pinning its idle rings, so
// that the table never keeps tokens of connections the process cannot have.
func resumeTableEntries(memlock uint64, l ring.Layout) int {
	idle := uint64(pinnedIdle(l))
	if idle == 0 || memlock/idle >= maxResumeEntries {
		return maxResumeEntries
	}
	return max(int(memlock/idle), minResumeEntries)
}

// newResumeListener is the extension's state for a listener configured by
// set, at addr (IPv6 alone if v6only), with a locked-memory limit of
// memlock bytes; local lists the host's addresses, for a wildcard
// listener's replies. It returns nil when the switch is off.
func newResumeListener(set settings, addr netip.AddrPort, v6only bool, memlock uint64, local []netip.Addr) (*resumeListener, error) {
	if !set.resume {
		return nil, nil
	}
	cfg := set.ring
	cfg.RetainUntilReceived = true
	table, err := resume.NewTable[*resumeEntry](resume.TableConfig{
		MaxEntries: resumeTableEntries(memlock, cfg.Normalize().Layout()),
	})
	if err != nil {
		return nil, err
	}
	return &resumeListener{table: table, addrs: resumeAddrs(addr, v6only, local)}, nil
}

// resumeAddrs is what a listener at addr can name in a reply among the
// host's addresses local: none for a listener on one address; for a
// wildcard one those of its family (both on a dual-stack "[::]" unless
// v6only) that a dialer elsewhere can use (see resume.ParseReply), in
// local's order.
func resumeAddrs(addr netip.AddrPort, v6only bool, local []netip.Addr) []netip.AddrPort {
	if !addr.Addr().IsUnspecified() {
		return nil
	}
	var out []netip.AddrPort
	for _, ip := range local {
		ip = ip.Unmap()
		if addr.Addr().Is4() && !ip.Is4() || v6only && ip.Is4() || !usableResumeAddr(ip) {
			continue
		}
		out = append(out, netip.AddrPortFrom(ip, addr.Port()))
	}
	return out
}

// usableResumeAddr reports whether a dialer on another host can reach ip as
// the wire states it: unicast, routable, without a zone.
func usableResumeAddr(ip netip.Addr) bool {
	switch {
	case !ip.IsValid(), ip.Zone() != "", ip.IsUnspecified(), ip.IsMulticast(), ip.IsLoopback(),
		ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}), ip.Is4In6():
		return false
	case ip.Is6() && (ip.IsLinkLocalUnicast() || isIPv4CompatibleAddr(ip)):
		return false
	}
	return true
}

// isIPv4CompatibleAddr reports whether ip is in ::/96, which no stack routes.
func isIPv4CompatibleAddr(ip netip.Addr) bool {
	b := ip.As16()
	return [12]byte(b[:12]) == [12]byte{}
}

// screen reads a connection request's extension before anything is set up
// for it: offer says the dialer offers the extension and this listener
// takes offers. A request that resumes a connection is refused
// (errResumeRefused, reject reason 6), whether or not the switch is on: it
// is never taken for a new connection, which its dialer would drop at
// once. With the switch on, a broken extension is the dialer's protocol
// error (reason 2); with it off, the listener reads no flag but the
// resume one, as a listener from before the extension.
func (r *resumeListener) screen(privateData []byte) (offer bool, err error) {
	if len(privateData) < ring.ConnDataSize {
		return false, nil // admit refuses it
	}
	const resuming = resume.ConnDataFlag | resume.ResumeFlag
	if r == nil {
		if privateData[1]&resuming == resuming {
			return false, errResumeRefused
		}
		return false, nil
	}
	req, err := resume.ParseRequest(privateData)
	if err != nil {
		return false, err
	}
	switch req.Kind {
	case resume.Resume:
		return false, errResumeRefused
	case resume.Offer:
		return true, nil
	}
	return false, nil
}

// acceptNegotiation is one connection request's part of the extension at
// the listener, from its grant to the connection handed out. Without a
// grant its methods change nothing: the connection is an ordinary one.
type acceptNegotiation struct {
	r     *resumeListener
	grant *resumeGrant // nil: the connection goes without resume
	done  bool         // the connection was handed out, and forgets its token when it ends
}

// begin gives the connection from remote, whose request offered the
// extension if offer, its entry and token: not for no offer, with the
// switch off, or with the table full (the connection goes without resume).
// The caller defers end, which forgets the token unless the connection is
// handed out by conn.
func (r *resumeListener) begin(offer bool, remote net.Addr) (*acceptNegotiation, error) {
	n := &acceptNegotiation{r: r}
	if r == nil || !offer {
		return n, nil
	}
	e := &resumeEntry{remote: remote}
	tok, _, err := r.table.Issue(e)
	switch {
	case errors.Is(err, resume.ErrTableFull):
		return n, nil
	case err != nil:
		return nil, err
	}
	n.grant = &resumeGrant{entry: e, token: tok}
	return n, nil
}

// ringConfig is the ring configuration for the connection: with the
// extension agreed it keeps sent bytes until the peer has them.
func (n *acceptNegotiation) ringConfig(cfg ring.Config) ring.Config {
	if n.grant == nil {
		return cfg
	}
	cfg.RetainUntilReceived = true
	return cfg.Normalize()
}

// reply is the reply's private data: the engine's conn data (connData),
// and with the extension agreed the extension after it, naming the
// listener's addresses but the one dialled, IPv4 and IPv6 alike.
func (n *acceptNegotiation) reply(connData []byte, dialled netip.Addr) ([]byte, error) {
	if n.grant == nil {
		return connData, nil
	}
	addrs := make([]netip.AddrPort, 0, resume.MaxAddrs)
	for _, a := range n.r.addrs {
		if len(addrs) == resume.MaxAddrs {
			break
		}
		if a.Addr() != dialled.Unmap() {
			addrs = append(addrs, a)
		}
	}
	return resume.EncodeReply(connData, resume.Reply{
		Version:  resume.Version,
		Lifetime: n.r.table.Lifetime(),
		Token:    n.grant.token,
		Addrs:    addrs,
	})
}

// conn hands the established connection out; from now on its end, not
// end, forgets its token.
func (n *acceptNegotiation) conn(qp stream.QueuePair, eng *ring.Engine, set settings) *Conn {
	n.done = true
	var ended func()
	if g := n.grant; g != nil {
		ended = func() { n.r.table.Forget(g.entry) }
	}
	return newNegotiatedConn(qp, eng, set, nil, ended)
}

// end forgets the token of a handshake that failed or was evicted before
// its connection was handed out, so that it holds no table entry.
func (n *acceptNegotiation) end() {
	if !n.done && n.grant != nil {
		n.r.table.Forget(n.grant.entry)
	}
}

// noMemlockLimit is RLIMIT_MEMLOCK's "unlimited" (RLIM_INFINITY), for
// resumeTableEntries.
const noMemlockLimit = math.MaxUint64

// pinnable is how much a process may pin under a locked-memory limit of
// limit bytes: all of it unless exempt, when the kernel lets it pin past
// the limit (CAP_IPC_LOCK in the initial user namespace, as root usually
// has), and then without bound.
func pinnable(limit uint64, exempt bool) uint64 {
	if exempt {
		return noMemlockLimit
	}
	return limit
}
