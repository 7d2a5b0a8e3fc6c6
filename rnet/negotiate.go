package rnet

import (
	"errors"
	"math"
	"net"
	"net/netip"
	"time"

	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
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
// request already carries that window; if the listener declines, the
// connection is an ordinary one that still retains.
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
// set, at addr, with a locked-memory limit of memlock bytes; local lists
// the host's addresses, for a wildcard listener's replies. It returns nil
// when the switch is off.
func newResumeListener(set settings, addr netip.AddrPort, memlock uint64, local []netip.Addr) (*resumeListener, error) {
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
	return &resumeListener{table: table, addrs: resumeAddrs(addr, local)}, nil
}

// resumeAddrs is what a listener at addr can name in a reply among the
// host's addresses local: none for a listener on one address; for a
// wildcard one those of its family (both on a dual-stack "[::]") that a
// dialer elsewhere can use (see resume.ParseReply), in local's order.
func resumeAddrs(addr netip.AddrPort, local []netip.Addr) []netip.AddrPort {
	if !addr.Addr().IsUnspecified() {
		return nil
	}
	var out []netip.AddrPort
	for _, ip := range local {
		ip = ip.Unmap()
		if addr.Addr().Is4() && !ip.Is4() || !usableResumeAddr(ip) {
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

// grant gives the connection from remote whose request offered the
// extension its entry and token, or returns nil: for no offer, with the
// switch off, or with the table full (the connection goes without resume).
// Every grant is forgotten once its connection or handshake ends.
func (r *resumeListener) grant(offer bool, remote net.Addr) (*resumeGrant, error) {
	if r == nil || !offer {
		return nil, nil
	}
	e := &resumeEntry{remote: remote}
	tok, _, err := r.table.Issue(e)
	if errors.Is(err, resume.ErrTableFull) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &resumeGrant{entry: e, token: tok}, nil
}

// ringConfig is the ring configuration for the connection g is for: with
// the extension agreed it keeps sent bytes until the peer has them.
func (g *resumeGrant) ringConfig(cfg ring.Config) ring.Config {
	if g == nil {
		return cfg
	}
	cfg.RetainUntilReceived = true
	return cfg.Normalize()
}

// replyData is the reply's private data: the engine's conn data
// (connData), and with g the extension after it, naming the listener's
// addresses but the one dialled, IPv4 and IPv6 alike.
func (r *resumeListener) replyData(connData []byte, g *resumeGrant, dialled netip.Addr) ([]byte, error) {
	if g == nil {
		return connData, nil
	}
	addrs := make([]netip.AddrPort, 0, resume.MaxAddrs)
	for _, a := range r.addrs {
		if len(addrs) == resume.MaxAddrs {
			break
		}
		if a.Addr() != dialled.Unmap() {
			addrs = append(addrs, a)
		}
	}
	return resume.EncodeReply(connData, resume.Reply{
		Version:  resume.Version,
		Lifetime: r.table.Lifetime(),
		Token:    g.token,
		Addrs:    addrs,
	})
}

// forget drops g's connection from the table: its handshake failed or the
// connection ended.
func (r *resumeListener) forget(g *resumeGrant) {
	if r != nil && g != nil {
		r.table.Forget(g.entry)
	}
}

// forgetOnEnd returns the function a connection granted g calls when it
// ends, or nil without a grant.
func (r *resumeListener) forgetOnEnd(g *resumeGrant) func() {
	if r == nil || g == nil {
		return nil
	}
	return func() { r.table.Forget(g.entry) }
}

// noMemlockLimit is RLIMIT_MEMLOCK's "unlimited", for resumeTableEntries.
const noMemlockLimit = math.MaxUint64
