package rnet

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/rnet-dev/rnet/internal/resume"
	"github.com/rnet-dev/rnet/internal/ring"
	"github.com/rnet-dev/rnet/internal/stream"
)

// Negotiating the resume extension at connect (docs/design.md, "Resuming a
// connection on another path"): a connection that agreed keeps its sent
// bytes until the peer has them, and its dialer holds a token.
// Config.Resume turns it on; off, C rsocket peers and older rnet peers see
// the bytes they always did.

// resumeAgreement is what a dialer keeps of a listener's agreement to
// resume its connection: the token to present, how long the listener waits
// for it once the path fails, and the listener's other addresses.
type resumeAgreement struct {
	token    resume.Token
	lifetime time.Duration
	addrs    []netip.AddrPort
	tcp      bool // the listener takes resumes over TCP (resume.TCPFlag)
	// reached is the address the reply came from, which the reply leaves
	// out of addrs: the one dialled, or the one a resume reached.
	reached netip.AddrPort
}

// agreementOf is what a dialer keeps of the listener's reply r, which came
// from the address reached.
func agreementOf(r resume.Reply, reached netip.AddrPort) resumeAgreement {
	return resumeAgreement{token: r.Token, lifetime: r.Lifetime, addrs: r.Addrs, tcp: r.TCP, reached: reached}
}

// errResumeRefused is what a listener tells its HandshakeError hook when it
// refuses a request that resumes a connection (reject reason 6), before
// anything is set up for it: wrapped with the table's reason (an unknown
// or expired token), or errNoResumes.
var (
	errResumeRefused = errors.New("rnet: resume request refused")
	errNoResumes     = fmt.Errorf("%w: this listener does not resume connections (Config.Resume)", errResumeRefused)
)

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
// data (connData), with the offer appended with Config.Resume.
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
	a := agreementOf(r, netip.AddrPort{}) // the dialer knows where it dialled
	return &a, nil
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
// replies. A nil *resumeListener is a listener without Config.Resume.
type resumeListener struct {
	set   settings
	table *resume.Table[*resumeEntry]
	// devices are the listener's addresses, by device, that a reply may
	// name: every usable local address for a wildcard listener, none for
	// a listener on one address. Set once before the first request.
	devices []replyDevice
	// tcp says the listener is a DualListener's RDMA side, whose TCP side
	// takes resumes (resume_tcp_linux.go): its replies say so.
	tcp atomic.Bool
	// peers counts, by their dialer's address, the connections in the
	// table, those waiting for their dialer, and the TCP side's looks at
	// new connections (resume_peers.go).
	peers peerCounts
	// handshakes counts the resume handshakes alive (resume_handshake.go).
	handshakes atomic.Int64
}

// hostDevice is one RDMA device of the host and its IP addresses.
type hostDevice struct {
	name  string
	addrs []netip.Addr
}

// replyDevice is one device's addresses that a listener's replies name.
type replyDevice struct {
	name  string
	addrs []netip.AddrPort
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
// memlock bytes; local lists the host's devices and their addresses, for a
// wildcard listener's replies. It returns nil without Config.Resume.
func newResumeListener(set settings, addr netip.AddrPort, v6only bool, memlock uint64, local []hostDevice) (*resumeListener, error) {
	if !set.resume {
		return nil, nil
	}
	cfg := set.ring
	cfg.RetainUntilReceived = true
	table, err := resume.NewTable[*resumeEntry](resume.TableConfig{
		MaxEntries: resumeTableEntries(memlock, cfg.Normalize().Layout()),
		Lifetime:   resumeLifetime(set.resumeTimeout),
	})
	if err != nil {
		return nil, err
	}
	return &resumeListener{set: set, table: table, devices: resumeAddrs(addr, v6only, local)}, nil
}

// resumeLifetime is how long a listener whose ResumeTimeout is timeout
// keeps a connection whose path failed: twice that, in whole seconds, at
// least resume.DefaultLifetime, since it may see the path fail before
// the dialer does and the dialer's timeout may be longer than its own.
func resumeLifetime(timeout time.Duration) time.Duration {
	l := (2*timeout + time.Second - 1).Truncate(time.Second)
	return min(max(l, resume.DefaultLifetime), resume.MaxTableLifetime)
}

// resumeAddrs is what a listener at addr can name in a reply among the
// host's devices' addresses local: none for a listener on one address; for
// a wildcard one those of its family (both on a dual-stack "[::]" unless
// v6only) that a dialer elsewhere can use (resume.AddrProblem), by device,
// in local's order.
func resumeAddrs(addr netip.AddrPort, v6only bool, local []hostDevice) []replyDevice {
	if !addr.Addr().IsUnspecified() {
		return nil
	}
	var out []replyDevice
	for _, d := range local {
		rd := replyDevice{name: d.name}
		for _, ip := range d.addrs {
			ip = ip.Unmap()
			a := netip.AddrPortFrom(ip, addr.Port())
			if addr.Addr().Is4() && !ip.Is4() || v6only && ip.Is4() || resume.AddrProblem(a) != "" {
				continue
			}
			rd.addrs = append(rd.addrs, a)
		}
		if len(rd.addrs) > 0 {
			out = append(out, rd)
		}
	}
	return out
}

// replyAddrs picks the addresses a reply names, at most resume.MaxAddrs,
// never the one dialled: first the other devices', one of each in turn, so
// that a dialer learns paths that do not share the failed port even when
// a device has many addresses; then the other addresses of the device the
// request came in on (arrival), which share its port.
func replyAddrs(devices []replyDevice, dialled netip.Addr, arrival string) []netip.AddrPort {
	dialled = dialled.Unmap()
	out := make([]netip.AddrPort, 0, resume.MaxAddrs)
	add := func(a netip.AddrPort) {
		if len(out) < resume.MaxAddrs && a.Addr() != dialled {
			out = append(out, a)
		}
	}
	for round := 0; len(out) < resume.MaxAddrs; round++ {
		more := false
		for _, d := range devices {
			if d.name != arrival && round < len(d.addrs) {
				more = true
				add(d.addrs[round])
			}
		}
		if !more {
			break
		}
	}
	for _, d := range devices {
		if d.name == arrival {
			for _, a := range d.addrs {
				add(a)
			}
		}
	}
	return out
}

// namespaceAddrs keeps, of each device's addresses, those on one of this
// network namespace's interfaces ifaces: a device shared between
// namespaces has RoCE GIDs for other namespaces' netdevs too, and a
// resume sent there would give the token to whatever listens on that
// port in another namespace.
func namespaceAddrs(devices []hostDevice, ifaces []netInterface) []hostDevice {
	here := make(map[netip.Addr]bool)
	for _, ifc := range ifaces {
		for _, a := range ifc.addrs {
			here[a.Unmap()] = true
		}
	}
	out := make([]hostDevice, 0, len(devices))
	for _, d := range devices {
		kept := hostDevice{name: d.name}
		for _, a := range d.addrs {
			if here[a.Unmap()] {
				kept.addrs = append(kept.addrs, a)
			}
		}
		out = append(out, kept)
	}
	return out
}

// screened is what a listener learnt from a connection request's
// extension before anything is set up for it.
type screened struct {
	// offer says the dialer offers the extension and the listener takes
	// offers.
	offer bool
	// resume is a request to resume a connection whose token the table
	// took, its handshake to run (see handshakeResume); nil otherwise.
	resume *resume.Attempt[*resumeEntry]
}

// screen reads a connection request's extension before anything is set up
// for it. A request that resumes a connection whose token the table does
// not take (unknown, replayed or expired) is refused with reject reason 6,
// as is every resume by a listener without Config.Resume: it is never
// taken for a new connection, which its dialer would drop at once. With
// Config.Resume, a broken extension is the dialer's protocol error
// (reason 2); without it, the listener reads bits 5 and 4 only to refuse
// a resume, and ignores the rest of the extension.
func (r *resumeListener) screen(privateData []byte) (screened, error) {
	if len(privateData) < ring.ConnDataSize {
		return screened{}, nil // admit refuses it
	}
	const resuming = resume.ConnDataFlag | resume.ResumeFlag
	if r == nil {
		if privateData[1]&resuming == resuming {
			return screened{}, errNoResumes
		}
		return screened{}, nil
	}
	req, err := resume.ParseRequest(privateData)
	if err != nil {
		return screened{}, err
	}
	switch req.Kind {
	case resume.Resume:
		a, err := r.table.Begin(req.Token)
		if err != nil {
			return screened{}, fmt.Errorf("%w: %w", errResumeRefused, err)
		}
		return screened{resume: &a}, nil
	case resume.Offer:
		return screened{offer: true}, nil
	}
	return screened{}, nil
}

// acceptNegotiation is one connection request's part of the extension at
// the listener, from its grant to the connection handed out. Without a
// grant its methods change nothing: the connection is an ordinary one.
type acceptNegotiation struct {
	r     *resumeListener
	grant *resumeGrant // nil: the connection goes without resume
	done  bool         // the connection was handed out, and forgets its token when it ends
}

// begin gives the connection whose request offered the extension if offer
// its entry and token. A request without an offer, a listener without
// Config.Resume, or a full table gets none: the connection goes without
// resume. The caller defers end, which forgets the token unless the
// connection is handed out by conn.
func (r *resumeListener) begin(offer bool) (*acceptNegotiation, error) {
	n := &acceptNegotiation{r: r}
	if r == nil || !offer {
		return n, nil
	}
	e := newResumeEntry(r)
	tok, path, err := r.table.Issue(e)
	switch {
	case errors.Is(err, resume.ErrTableFull):
		return n, nil
	case err != nil:
		return nil, err
	}
	e.path = path
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
// listener's addresses but the one dialled (see replyAddrs); arrival is
// the device the request came in on.
func (n *acceptNegotiation) reply(connData []byte, dialled netip.Addr, arrival string) ([]byte, error) {
	if n.grant == nil {
		return connData, nil
	}
	return resume.EncodeReply(connData, resume.Reply{
		Version:  resume.Version,
		Lifetime: n.r.table.Lifetime(),
		Token:    n.grant.token,
		Addrs:    replyAddrs(n.r.devices, dialled, arrival),
		TCP:      n.r.tcp.Load(),
	})
}

// conn hands the established connection out, with its entry as its
// resumer; from now on its end, not end, forgets its token.
func (n *acceptNegotiation) conn(qp stream.QueuePair, eng *ring.Engine, set settings) *Conn {
	n.done = true
	g := n.grant
	if g == nil {
		return newNegotiatedConn(qp, eng, set, nil, nil)
	}
	h := newNegotiatedConn(qp, eng, set, nil, g.entry)
	g.entry.handedOut(h.conn)
	return h
}

// end forgets the token of a handshake that failed or was evicted before
// its connection was handed out, so that it holds no table entry.
func (n *acceptNegotiation) end() {
	if !n.done && n.grant != nil {
		n.grant.entry.Forget()
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
